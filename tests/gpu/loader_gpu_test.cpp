// The loader's device-transfer stage (pinned staging, H2D copy on its own stream): batches land
// on the GPU with exactly the bytes the CPU loader produces, and an early stop joins every thread.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <vector>

#include <echelon/data/loader.h>

using namespace echelon;
using namespace echelon::data;

namespace {

std::shared_ptr<Dataset> synthetic(int64_t size) {
  SyntheticOptions options;
  options.size = size;
  options.num_classes = 10;
  options.channels = 3;
  options.height = 8;
  options.width = 8;
  return make_synthetic_dataset(options);
}

LoaderOptions options_on(Device device) {
  LoaderOptions options;
  options.batch_size = 16;
  options.workers = 1;  // one worker: batch composition does not depend on timing
  options.seed = 5;
  options.device = device;
  options.prefetch_batches = 3;
  return options;
}

}  // namespace

TEST_SUITE("gpu_loader") {
  TEST_CASE("device batches equal the CPU loader's batches, epoch after epoch") {
    const auto dataset = synthetic(100);
    Loader cpu(dataset, options_on(Device::cpu()));
    Loader gpu(dataset, options_on(Device::cuda(0)));
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      CAPTURE(epoch);
      cpu.start_epoch(epoch);
      gpu.start_epoch(epoch);
      int batches = 0;
      while (auto expected = cpu.next()) {
        auto got = gpu.next();
        REQUIRE(got.has_value());
        CHECK(got->images.device() == Device::cuda(0));
        CHECK(got->labels.device() == Device::cuda(0));
        CHECK(got->index == expected->index);
        CHECK(got->images.to(Device::cpu()).to_vector<float>() ==
              expected->images.to_vector<float>());
        CHECK(got->labels.to(Device::cpu()).to_vector<int64_t>() ==
              expected->labels.to_vector<int64_t>());
        ++batches;
      }
      CHECK_FALSE(gpu.next().has_value());
      CHECK(batches == 7);
    }
  }

  TEST_CASE("destroying a device loader mid-epoch joins every thread quickly") {
    const auto dataset = synthetic(4000);
    auto done = std::async(std::launch::async, [&] {
      Loader loader(dataset, options_on(Device::cuda(0)));
      loader.start_epoch(0);
      for (int i = 0; i < 3; ++i) REQUIRE(loader.next().has_value());
    });
    REQUIRE(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    done.get();
  }
}
