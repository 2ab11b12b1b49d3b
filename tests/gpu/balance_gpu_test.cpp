// --balance auto on a real device: profile_layers must time the layers' kernels, not their
// enqueue, and must leave nothing running when the pipeline hands the model to its stage streams.
#include <doctest/doctest.h>

#include <echelon/cuda/stream.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/balance.h>
#include "tests/support/parity.h"

using namespace echelon;

TEST_SUITE("balance_gpu") {
  TEST_CASE("profile_layers on CUDA: every layer timed, no work in flight on return") {
    const Device cuda = Device::cuda(0);
    cuda::Stream stream;
    cuda::StreamGuard guard(stream);  // the model, the sample and the profile on one stream
    const auto model = make_model("lenet5", 1, 10, 7);
    model->to(cuda);
    // The emulation build (ECHELON_CUDA_SIM) runs every CUDA thread on the CPU: a smaller batch.
#if ECHELON_CUDA_SIM
    const int64_t batch = 8;
#else
    const int64_t batch = 256;
#endif
    const parity::InputSpec spec{{batch, 1, 28, 28},         kFloat32, -1.0, 1.0,
                                 parity::Layout::Contiguous, {}};
    const Tensor sample = parity::make_inputs({spec}, 3, cuda)[0];
    const std::vector<parallel::LayerProfile> profiles =
        parallel::profile_layers(*model, sample, /*repeats=*/3, /*warmup=*/1);
    // The gradients zeroed last are queued on `stream`: the stream is idle only if the profile
    // waited for them.
    CHECK(cudaStreamQuery(stream.get()) == cudaSuccess);
    REQUIRE(profiles.size() == model->size());
    for (size_t i = 0; i < profiles.size(); ++i) {
      CHECK_MESSAGE(profiles[i].forward_s > 0, "layer ", i);
      CHECK_MESSAGE(profiles[i].activation_bytes > 0, "layer ", i);
    }
  }
}
