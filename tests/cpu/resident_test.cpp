// --resident-data (data/resident.h, ops::augment_gather) and --target-accuracy: the resident set
// yields the loader's batches bit for bit, so training on it gives the loader run's losses; bad
// plans, shapes and flag combinations are refused naming what is wrong.
#include <doctest/doctest.h>

#include <sstream>

#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/data/resident.h>
#include <echelon/tensor/ops.h>

using namespace echelon;
using namespace echelon::data;

namespace {

std::shared_ptr<Dataset> synthetic(int64_t size, int64_t channels) {
  SyntheticOptions options;
  options.size = size;
  options.channels = channels;
  options.height = 7;
  options.width = 9;  // not square: rows and columns must not be swapped
  return make_synthetic_dataset(options);
}

AugmentOptions crop_flip_normalise() {
  AugmentOptions augment;
  augment.crop_padding = 2;
  augment.horizontal_flip = true;
  augment.mean = {0.25f, 0.5f, 0.75f};
  augment.std = {0.5f, 0.25f, 0.125f};
  return augment;
}

// Plan (B, 4) rows (index, dy, dx, flip) as an int32 CPU tensor.
Tensor plan_of(const std::vector<int32_t>& rows) {
  Tensor plan = Tensor::empty({static_cast<int64_t>(rows.size()) / 4, 4}, kInt32, Device::cpu());
  std::copy(rows.begin(), rows.end(), plan.data<int32_t>());
  return plan;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

app::TrainOptions synthetic_run() {
  app::TrainOptions o;
  o.model = "lenet5";
  o.data = "synthetic";
  o.device = "cpu";
  o.limit_train = 96;
  o.limit_test = 40;
  o.epochs = 2;
  o.batch_size = 32;
  o.lr = 0.02;
  o.seed = 3;
  o.augment = "crop:2,flip";
  o.progress = "none";
  o.log_every = 0;
  return o;
}

}  // namespace

TEST_SUITE("resident") {
  TEST_CASE("resident batches equal the loader's with one worker, bit for bit") {
    const auto dataset = synthetic(45, 3);
    for (const bool drop_last : {false, true}) {
      CAPTURE(drop_last);
      LoaderOptions l;
      l.batch_size = 8;
      l.workers = 1;
      l.seed = 11;
      l.drop_last = drop_last;
      l.augment = crop_flip_normalise();
      Loader loader(dataset, l);
      ResidentData resident(
          *dataset,
          {.batch_size = 8, .drop_last = drop_last, .seed = 11, .augment = crop_flip_normalise()});
      CHECK(resident.batches_per_epoch() == loader.batches_per_epoch_fresh());
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        CAPTURE(epoch);
        loader.start_epoch(epoch);
        resident.start_epoch(epoch);
        int64_t batches = 0;
        while (auto expected = loader.next()) {
          auto got = resident.next();
          REQUIRE(got.has_value());
          CHECK(got->index == expected->index);
          CHECK(got->fresh == expected->fresh);
          CHECK(got->images.shape() == expected->images.shape());
          CHECK(got->images.to_vector<float>() == expected->images.to_vector<float>());
          CHECK(got->labels.to_vector<int64_t>() == expected->labels.to_vector<int64_t>());
          ++batches;
        }
        CHECK_FALSE(resident.next().has_value());
        CHECK(batches == (drop_last ? 5 : 6));
      }
    }
  }

  TEST_CASE("augment_gather crops, pads with zeros and flips as the plan says") {
    // One 1x2x3 image: rows (1 2 3), (4 5 6); no normalisation (scale 1, shift 0).
    Tensor images = Tensor::empty({1, 1, 2, 3}, kUInt8, Device::cpu());
    const std::vector<uint8_t> pixels = {1, 2, 3, 4, 5, 6};
    std::copy(pixels.begin(), pixels.end(), images.data<uint8_t>());
    // pad 1: dy = dx = 1 is the identity; dy = 0 shifts the image down one row (top row zero).
    const Tensor out =
        ops::augment_gather(images, plan_of({0, 1, 1, 0, 0, 0, 1, 0, 0, 2, 2, 1}), 1, {1}, {0});
    CHECK(out.shape() == Shape{3, 1, 2, 3});
    CHECK(out.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6,    // identity
                                                       0, 0, 0, 1, 2, 3,    // down one row
                                                       0, 6, 5, 0, 0, 0});  // flipped, up, right
  }

  TEST_CASE("bad plans and shapes are refused naming the row or the shape") {
    const Tensor images = Tensor::zeros({2, 1, 4, 4}, kUInt8);
    auto gather = [&](const std::vector<int32_t>& rows) {
      return error_of([&] { ops::augment_gather(images, plan_of(rows), 1, {1}, {0}); });
    };
    CHECK(gather({0, 0, 0, 0, 2, 0, 0, 0}).find("plan row 1 (index 2") != std::string::npos);
    CHECK(gather({0, 3, 0, 0}).find("dy and dx in [0, 2]") != std::string::npos);
    CHECK(gather({0, 0, -1, 0}).find("plan row 0") != std::string::npos);
    CHECK(gather({0, 0, 0, 2}).find("flip 0 or 1") != std::string::npos);
    const Tensor three_columns = Tensor::zeros({1, 3}, kInt32);
    CHECK(error_of([&] {
            ops::augment_gather(images, three_columns, 1, {1}, {0});
          }).find("plan must be (B, 4)") != std::string::npos);
    CHECK(error_of([&] {
            ops::augment_gather(images, plan_of({0, 0, 0, 0}), 1, {1, 1}, {0});
          }).find("2 scales and 1 shifts for 1 channels") != std::string::npos);
    const Tensor five_channels = Tensor::zeros({1, 5, 2, 2}, kUInt8);
    CHECK(error_of([&] {
            ops::augment_gather(five_channels, plan_of({0, 0, 0, 0}), 0, {1, 1, 1, 1, 1},
                                {0, 0, 0, 0, 0});
          }).find("5 channels; 1 to 4") != std::string::npos);
    CHECK(error_of([&] {
            ops::augment_gather(Tensor::zeros({2, 1, 4, 4}), plan_of({0, 0, 0, 0}), 1, {1}, {0});
          }).find("images") != std::string::npos);
  }

  TEST_CASE("training on the resident set gives the loader run's losses exactly") {
    std::ostringstream quiet;
    app::TrainOptions loader_run = synthetic_run();
    app::TrainOptions resident_run = synthetic_run();
    resident_run.resident_data = true;
    const app::TrainResult a = app::train(loader_run, quiet);
    const app::TrainResult b = app::train(resident_run, quiet);
    REQUIRE(a.step_losses.size() == 6);
    CHECK(b.step_losses == a.step_losses);
    REQUIRE(b.epochs.size() == 2);
    CHECK(b.epochs[1].test_loss == a.epochs[1].test_loss);
    CHECK(b.epochs[1].test_acc == a.epochs[1].test_acc);
    CHECK(b.summary.at("echo").at("source").as_string() == "resident");
  }

  TEST_CASE("--target-accuracy stops at the first epoch that reaches it and reports the time") {
    std::ostringstream out;
    app::TrainOptions o = synthetic_run();
    o.epochs = 4;
    o.target_accuracy = 1e-6;  // any epoch with one correct test image reaches it
    o.resident_data = true;
    const app::TrainResult r = app::train(o, out);
    CHECK(r.completed);
    REQUIRE(r.epochs.size() == 1);
    CHECK(r.target_epoch == 1);
    CHECK(r.time_to_target_s > 0);
    CHECK(r.summary.at("target_epoch").as_int() == 1);
    CHECK(r.summary.at("time_to_target_s").as_double() == r.time_to_target_s);
    CHECK(out.str().find("at epoch 1: ") != std::string::npos);
    // Time to accuracy says where the start-up went (the resident upload included).
    CHECK(out.str().find("start-up ") != std::string::npos);
    CHECK(out.str().find(", resident data ") != std::string::npos);
    CHECK(r.summary.at("startup").at("resident_s").as_double() > 0);

    std::ostringstream out2;
    o.target_accuracy = 1.0;  // a 10-class synthetic set is not learnt perfectly in 2 epochs
    o.epochs = 2;
    const app::TrainResult missed = app::train(o, out2);
    CHECK(missed.epochs.size() == 2);
    CHECK(missed.target_epoch == 0);
    CHECK(missed.summary.at("time_to_target_s").as_double() == 0);
  }

  TEST_CASE("flags the resident set cannot honour are refused naming them") {
    std::ostringstream quiet;
    app::TrainOptions o = synthetic_run();
    o.resident_data = true;
    o.echo = "2";
    CHECK(error_of([&] { app::train(o, quiet); }).find("drop --echo 2") != std::string::npos);
    o.echo = "1";
    o.shuffle_buffer = 64;
    CHECK(error_of([&] { app::train(o, quiet); }).find("--shuffle-buffer 64") != std::string::npos);
    o.shuffle_buffer = 0;
    o.target_accuracy = 1.5;
    CHECK(error_of([&] { app::train(o, quiet); }).find("--target-accuracy must be a fraction") !=
          std::string::npos);
  }
}
