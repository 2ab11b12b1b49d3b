// CUDA emulation: the error functions of the runtime API (names and strings as the real runtime
// reports them; a sticky fault's string is the emulator's diagnosis).
#include <echelon/cuda/sim/internal.h>

using namespace echelon::cudasim::detail;

cudaError_t cudaGetLastError() {
  const cudaError_t err = result(last_error());
  last_error() = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError() {
  return result(last_error());
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define ECH_SIM_NAME(e) \
  case e:               \
    return #e;
    ECH_SIM_NAME(cudaSuccess)
    ECH_SIM_NAME(cudaErrorInvalidValue)
    ECH_SIM_NAME(cudaErrorMemoryAllocation)
    ECH_SIM_NAME(cudaErrorInvalidConfiguration)
    ECH_SIM_NAME(cudaErrorInvalidDevicePointer)
    ECH_SIM_NAME(cudaErrorInvalidMemcpyDirection)
    ECH_SIM_NAME(cudaErrorPeerAccessUnsupported)
    ECH_SIM_NAME(cudaErrorNoDevice)
    ECH_SIM_NAME(cudaErrorInvalidDevice)
    ECH_SIM_NAME(cudaErrorInvalidResourceHandle)
    ECH_SIM_NAME(cudaErrorNotReady)
    ECH_SIM_NAME(cudaErrorIllegalAddress)
    ECH_SIM_NAME(cudaErrorPeerAccessAlreadyEnabled)
    ECH_SIM_NAME(cudaErrorLaunchFailure)
    ECH_SIM_NAME(cudaErrorIllegalState)
    ECH_SIM_NAME(cudaErrorStreamCaptureUnsupported)
    ECH_SIM_NAME(cudaErrorStreamCaptureInvalidated)
    ECH_SIM_NAME(cudaErrorStreamCaptureMerge)
    ECH_SIM_NAME(cudaErrorStreamCaptureUnmatched)
    ECH_SIM_NAME(cudaErrorStreamCaptureUnjoined)
    ECH_SIM_NAME(cudaErrorStreamCaptureIsolation)
    ECH_SIM_NAME(cudaErrorStreamCaptureImplicit)
    ECH_SIM_NAME(cudaErrorCapturedEvent)
    ECH_SIM_NAME(cudaErrorStreamCaptureWrongThread)
    ECH_SIM_NAME(cudaErrorUnknown)
#undef ECH_SIM_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  // A sticky fault's string carries the emulator's diagnosis (kernel, block, barrier site).
  if (const char* text = sticky_text(error)) return text;
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorPeerAccessUnsupported:
      return "peer access is not supported between these two devices";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "peer access is already enabled";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}
