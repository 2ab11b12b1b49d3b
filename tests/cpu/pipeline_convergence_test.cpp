// LeNet-5 trained with stale weights (the paper's schedule, 2 partitions on 2 CPU workers) still
// learns: a Fashion-MNIST subset reaches an accuracy floor on held-out test images. Slow (tens of
// seconds), so the suite is excluded from the default run.
#include <doctest/doctest.h>

#include <filesystem>

#include <echelon/data/dataset.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {

// The first n examples of a split, as normalised float images (N, 1, 28, 28) and labels (N).
std::pair<Tensor, Tensor> fashion_subset(const std::string& split, int64_t n) {
  data::LabeledImages set = data::load_fashion_mnist(data::kDefaultFashionMnistDir, split);
  const Tensor pixels = set.images.narrow(0, 0, n).contiguous().to(kFloat32);
  return {ops::add(ops::mul(pixels, 1.0 / (255.0 * 0.353)), -0.286 / 0.353),
          set.labels.narrow(0, 0, n).contiguous()};
}

}  // namespace

TEST_SUITE("slow_pipeline") {
  TEST_CASE("LeNet-5 with stale weights on 2 partitions converges on a Fashion-MNIST subset") {
    if (!std::filesystem::exists(std::string(data::kDefaultFashionMnistDir) +
                                 "/train-images-idx3-ubyte.gz")) {
      WARN_MESSAGE(false, "Fashion-MNIST not found in ", data::kDefaultFashionMnistDir,
                   "; convergence not tested");
      return;
    }
    const int64_t train_size = 6000, test_size = 1000, batch_size = 64;
    const auto [train_images, train_labels] = fashion_subset("train", train_size);
    const auto [test_images, test_labels] = fashion_subset("test", test_size);

    PipelineOptions options;
    options.schedule = ScheduleKind::Stale;
    options.ppv = "3";  // the paper's LeNet-5 placement: conv1 + pool1 in partition 0
    SGDOptions sgd;
    sgd.lr = 0.05;
    sgd.momentum = 0.9;
    PipelineEngine engine(make_model("lenet5", 1, 10, 1, 28), sgd, Device::cpu(), options);

    Generator gen(5);
    double first_epoch_loss = 0;
    StepStats epoch;
    for (int e = 0; e < 2; ++e) {
      epoch = {};
      const Tensor order = ops::randperm(train_size, gen);
      for (int64_t begin = 0, index = 0; begin < train_size; begin += batch_size, ++index) {
        const Tensor idx = order.narrow(0, begin, std::min(batch_size, train_size - begin));
        data::Batch batch;
        batch.images = ops::index_select(train_images, 0, idx.contiguous());
        batch.labels = ops::index_select(train_labels, 0, idx.contiguous());
        batch.index = index;
        batch.fresh = idx.size(0);
        epoch.add(engine.train_step(batch));
      }
      epoch.add(engine.finish_epoch());
      REQUIRE(epoch.finite);
      CHECK(epoch.samples == train_size);
      if (e == 0) first_epoch_loss = epoch.mean_loss();
    }
    CHECK(epoch.mean_loss() < first_epoch_loss);

    const auto stages = engine.partition_stats();
    REQUIRE(stages.size() == 2);
    CHECK(stages[0].max_staleness() == 1);  // K - 1 - k: partition 0 trained on stale weights
    CHECK(stages[1].max_staleness() == 0);

    const Tensor logits = engine.predict(test_images);
    const double accuracy =
        static_cast<double>(correct_count(logits, test_labels)) / static_cast<double>(test_size);
    MESSAGE("LeNet-5 stale, 2 partitions: test accuracy ", accuracy, " after 2 epochs of ",
            train_size, " examples");
    CHECK(accuracy >= 0.72);
  }
}
