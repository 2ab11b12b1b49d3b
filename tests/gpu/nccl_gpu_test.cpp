// One-process NCCL smoke test (tools/gpu-check.sh runs the GPU test binary): a communicator of
// one rank made without any bootstrap, an all-reduce (the sum over one rank is the tensor
// itself) and a device-to-device send to itself, all on a stream of our own. In the emulation
// build with MPI it runs on the emulated NCCL (cuda/sim/nccl.h), as do the multi-process paths
// (tests/mpi: cudasim_mpi_nccl_*); on real GPUs those need >= 2 GPUs: docs/distributed.md says
// how to run them (mpirun -np 2 ... --device cuda).
#include <doctest/doctest.h>

#if ECHELON_WITH_NCCL

#include <echelon/cuda/stream.h>
#include <echelon/parallel/nccl_comm.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

using namespace echelon;

TEST_SUITE("nccl_gpu") {
  TEST_CASE("NCCL, one rank: all-reduce and send/recv to itself on the current stream") {
    cuda::Stream stream(0);
    cuda::StreamGuard guard(stream);
    parallel::NcclCommunicator comm(1, 0, 0, [](parallel::NcclCommunicator::UniqueId&) {
      FAIL("one rank needs no id exchange");
    });
    MESSAGE("NCCL ", parallel::NcclCommunicator::version());
    Generator gen(5);
    const Tensor host = ops::randn({37, 5}, gen);  // odd sizes
    Tensor summed = host.to(Device::cuda(0));
    comm.all_reduce_sum({summed});
    Tensor received = Tensor::full({37, 5}, std::nan(""), kFloat32, Device::cuda(0));
    comm.exchange({{summed, 0}}, {{received, 0}});
    stream.synchronize();
    CHECK(summed.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
    CHECK(received.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  }
}

#endif
