// The loader's device-transfer stage (pinned staging, H2D copy on its own stream; inline, a
// synchronous copy): batches land on the GPU with exactly the bytes the CPU loader produces, and
// an early stop joins every thread.
// The resident set (--resident-data): its gather kernel equals its CPU twin bit for bit.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <optional>
#include <vector>

#include <sstream>

#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/data/resident.h>
#include <echelon/tensor/ops.h>

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

// Two epochs of `gpu` (batches on cuda:0) against `cpu` (the same source on the CPU): the same
// batches, byte for byte, `batches_per_epoch` of them each epoch.
template <typename Source>
void expect_device_copy_of(Source& cpu, Source& gpu, int batches_per_epoch) {
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    CAPTURE(epoch);
    cpu.start_epoch(epoch);
    gpu.start_epoch(epoch);
    int batches = 0;
    while (std::optional<Batch> expected = cpu.next()) {
      const std::optional<Batch> got = gpu.next();
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
    CHECK(batches == batches_per_epoch);
  }
}

}  // namespace

TEST_SUITE("gpu_loader") {
  TEST_CASE("device batches equal the CPU loader's batches, epoch after epoch") {
    const auto dataset = synthetic(100);
    Loader cpu(dataset, options_on(Device::cpu()));
    Loader gpu(dataset, options_on(Device::cuda(0)));
    expect_device_copy_of(cpu, gpu, 7);
  }

  TEST_CASE("the inline loader (workers 0) copies the same batches to the device") {
    const auto dataset = synthetic(100);
    Loader cpu(dataset, options_on(Device::cpu()));
    LoaderOptions inline_options = options_on(Device::cuda(0));
    inline_options.workers = 0;  // synchronous copy on the consumer's thread
    Loader gpu(dataset, inline_options);
    expect_device_copy_of(cpu, gpu, 7);
    const LoaderStats stats = gpu.stats();
    REQUIRE_FALSE(stats.stages.empty());
    CHECK(stats.stages.back().name == "transfer");
    CHECK(stats.stages.back().items == 7);
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

TEST_SUITE("gpu_resident") {
  TEST_CASE("augment_gather on the device equals its CPU twin bit for bit") {
    // 5 images of 3 x 5 x 7 (odd, not square), every pad offset and both flips, normalised.
    Tensor images = Tensor::empty({5, 3, 5, 7}, kUInt8, Device::cpu());
    for (int64_t i = 0; i < images.numel(); ++i)
      images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
    std::vector<int32_t> rows;
    for (int32_t dy = 0; dy <= 4; ++dy)
      for (int32_t dx = 0; dx <= 4; ++dx) rows.insert(rows.end(), {(dy + dx) % 5, dy, dx, dx % 2});
    Tensor plan = Tensor::empty({static_cast<int64_t>(rows.size()) / 4, 4}, kInt32, Device::cpu());
    std::copy(rows.begin(), rows.end(), plan.data<int32_t>());
    const std::vector<float> scale = {0.0137f, 0.021f, 1.0f / 255}, shift = {-0.4f, 0.3f, -2.1f};
    const Tensor expected = ops::augment_gather(images, plan, 2, scale, shift);
    const Tensor got =
        ops::augment_gather(images.to(Device::cuda(0)), plan.to(Device::cuda(0)), 2, scale, shift);
    CHECK(got.device() == Device::cuda(0));
    CHECK(got.to(Device::cpu()).to_vector<float>() == expected.to_vector<float>());
    // A device plan is checked on the host unless its caller vouches for it.
    Tensor bad = plan.clone();
    bad.data<int32_t>()[0] = 5;
    CHECK_THROWS_WITH_AS(
        ops::augment_gather(images.to(Device::cuda(0)), bad.to(Device::cuda(0)), 2, scale, shift),
        doctest::Contains("plan row 0 (index 5"), Error);
  }

  TEST_CASE("a resident set on the device yields the CPU resident set's batches") {
    const auto dataset = synthetic(37);
    AugmentOptions augment;
    augment.crop_padding = 3;
    augment.horizontal_flip = true;
    augment.mean = {0.5f};
    augment.std = {0.25f};
    ResidentData cpu(*dataset, {.batch_size = 16, .seed = 9, .augment = augment});
    ResidentData gpu(*dataset,
                     {.batch_size = 16, .seed = 9, .augment = augment, .device = Device::cuda(0)});
    expect_device_copy_of(cpu, gpu, 3);
  }

  TEST_CASE("training on a resident device set gives the device loader run's losses exactly") {
    app::TrainOptions o;
    o.model = "lenet5";
    o.data = "synthetic";
    o.device = "cuda:0";
    o.limit_train = 16;  // small: the emulation build runs this in four thread orders
    o.limit_test = 8;
    o.epochs = 1;
    o.batch_size = 8;
    o.augment = "crop:2,flip";
    o.progress = "none";
    o.log_every = 1;  // a loss per step
    std::ostringstream quiet;
    const app::TrainResult loader_run = app::train(o, quiet);
    o.resident_data = true;
    const app::TrainResult resident_run = app::train(o, quiet);
    REQUIRE(loader_run.step_losses.size() == 2);
    CHECK(resident_run.step_losses == loader_run.step_losses);
    CHECK(resident_run.epochs.at(0).test_loss == loader_run.epochs.at(0).test_loss);
  }
}
