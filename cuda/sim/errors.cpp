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
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}
