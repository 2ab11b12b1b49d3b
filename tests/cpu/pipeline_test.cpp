// The Loader's pipeline: batches and labels, determinism per (seed, epoch), errors that name the
// stage and item, skipping bad samples, and shutdown on early stop (bounded time, no deadlock).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include <echelon/base/error.h>
#include <echelon/data/loader.h>

using namespace echelon;
using namespace echelon::data;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<Dataset> synthetic(int64_t size, std::vector<int64_t> corrupt = {},
                                   double read_cost_us = 0) {
  SyntheticOptions options;
  options.size = size;
  options.num_classes = 1000000;  // label == index
  options.channels = 2;
  options.height = 3;
  options.width = 5;
  options.corrupt_indices = std::move(corrupt);
  options.read_cost_us = read_cost_us;
  return make_synthetic_dataset(options);
}

std::vector<int64_t> epoch_labels(Loader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> labels;
  while (auto batch = loader.next()) {
    for (int64_t label : batch->labels.to_vector<int64_t>()) labels.push_back(label);
  }
  return labels;
}

// Runs `body` on another thread; fails the test if it does not finish within `limit`.
template <typename Body>
void within(std::chrono::milliseconds limit, Body body) {
  auto done = std::async(std::launch::async, body);
  REQUIRE(done.wait_for(limit) == std::future_status::ready);
  done.get();
}

}  // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("one epoch: shapes, pixels, every example once, partial last batch") {
    LoaderOptions options;
    options.batch_size = 8;
    options.workers = 3;
    Loader loader(synthetic(45), options);
    CHECK(loader.batches_per_epoch_fresh() == 6);
    loader.start_epoch(0);
    std::multiset<int64_t> labels;
    int batches = 0;
    while (auto batch = loader.next()) {
      REQUIRE(batch->images.shape().size() == 4);
      CHECK(batch->images.dtype() == kFloat32);
      CHECK(batch->labels.dtype() == kInt64);
      CHECK(batch->index == batches);
      const int64_t b = batch->labels.size(0);
      CHECK(b == (batches < 5 ? 8 : 5));
      const auto pixels = batch->images.to_vector<float>();
      const auto ls = batch->labels.to_vector<int64_t>();
      for (int64_t i = 0; i < b; ++i) {
        labels.insert(ls[i]);
        // (C, H, W) float of the synthetic bytes / 255: check a corner of channel 1.
        const float want = synthetic_pixel(ls[i], 2, 4, 1) / 255.0f;
        CHECK(pixels[i * 30 + 15 + 2 * 5 + 4] == doctest::Approx(want));
      }
      ++batches;
    }
    CHECK(batches == 6);
    CHECK(labels.size() == 45);
    CHECK(std::set<int64_t>(labels.begin(), labels.end()).size() == 45);
    CHECK_FALSE(loader.next().has_value());  // stays ended
  }

  TEST_CASE("drop_last and no shuffle keep dataset order with one worker") {
    LoaderOptions options;
    options.batch_size = 4;
    options.workers = 1;
    options.shuffle = false;
    options.drop_last = true;
    Loader loader(synthetic(10), options);
    const auto labels = epoch_labels(loader, 0);
    CHECK(labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  }

  TEST_CASE("shuffle order is a function of (seed, epoch)") {
    LoaderOptions options;
    options.batch_size = 5;
    options.workers = 1;
    options.seed = 99;
    Loader a(synthetic(57), options), b(synthetic(57), options);
    const auto first = epoch_labels(a, 3);
    CHECK(first == epoch_labels(b, 3));
    CHECK(first != epoch_labels(b, 4));
    std::vector<int64_t> sorted = first;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted.front() == 0);
    CHECK(sorted.back() == 56);
  }

  TEST_CASE("a bad sample fails the epoch with the stage and item, or is skipped") {
    LoaderOptions options;
    options.batch_size = 4;
    Loader failing(synthetic(40, {13}), options);
    failing.start_epoch(0);
    std::string message;
    try {
      while (failing.next()) {
      }
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(message.find("stage 'decode'") != std::string::npos);
    CHECK(message.find("item 13") != std::string::npos);
    CHECK(message.find("synthetic[13]") != std::string::npos);

    options.on_bad_sample = OnBadSample::Skip;
    Loader skipping(synthetic(40, {13, 21}), options);
    const auto labels = epoch_labels(skipping, 0);
    CHECK(labels.size() == 38);
    CHECK(std::count(labels.begin(), labels.end(), 13) == 0);
    CHECK(skipping.stats().skipped == 2);
  }

  TEST_CASE("bad options are errors naming the option") {
    LoaderOptions options;
    options.batch_size = 0;
    CHECK_THROWS_WITH_AS(Loader(synthetic(5), options), doctest::Contains("batch_size"), Error);
    options.batch_size = 2;
    options.echo_factor = 0.5;
    CHECK_THROWS_WITH_AS(Loader(synthetic(5), options), doctest::Contains("echo_factor"), Error);
    CHECK_THROWS_WITH_AS(options.set_echo("fast"), doctest::Contains("echo factor 'fast'"), Error);
    options.set_echo("2.5");
    CHECK(options.echo_factor == 2.5);
    // An upper bound: --echo 1e6 ran an epoch for days, 1e300 overflowed the step count.
    for (const char* huge : {"1e6", "1e12", "1e300", "1000.5", "inf", "nan", "0.5", "1e"}) {
      CAPTURE(huge);
      CHECK_THROWS_WITH_AS(options.set_echo(huge),
                           doctest::Contains("must be a number in [1, 1000]"), Error);
    }
    options.set_echo("1000");
    CHECK(options.echo_factor == 1000);
    options.echo_factor = 1e6;
    CHECK_THROWS_WITH_AS(Loader(synthetic(5), options), doctest::Contains("in [1, 1000]"), Error);
    options.set_echo("auto");
    CHECK(options.echo_auto);
    CHECK_THROWS_AS(parse_echo_placement("middle"), Error);
    CHECK(parse_echo_placement("batch") == EchoPlacement::Batch);
    Loader idle(synthetic(5), LoaderOptions{});
    CHECK_THROWS_WITH_AS(idle.next(), doctest::Contains("start_epoch"), Error);
  }
}

TEST_SUITE("concurrency_loader") {
  TEST_CASE("destroying the loader mid-epoch joins every thread quickly") {
    within(5000ms, [] {
      LoaderOptions options;
      options.batch_size = 4;
      options.workers = 3;
      options.ring_capacity = 4;
      auto loader = std::make_unique<Loader>(synthetic(100000, {}, 50), options);
      loader->start_epoch(0);
      for (int i = 0; i < 3; ++i) REQUIRE(loader->next().has_value());
      loader.reset();  // rings are full and workers blocked: must still shut down
    });
  }

  TEST_CASE("request_stop from another thread ends a blocked next()") {
    within(5000ms, [] {
      LoaderOptions options;
      options.batch_size = 64;
      Loader loader(synthetic(1000000, {}, 100000), options);  // 0.1 s per read: next() blocks
      loader.start_epoch(0);
      std::thread stopper([&] {
        std::this_thread::sleep_for(50ms);
        loader.request_stop();
      });
      CHECK_FALSE(loader.next().has_value());
      stopper.join();
    });
  }

  TEST_CASE("an error deep in the pipeline shuts down within bounded time") {
    within(5000ms, [] {
      LoaderOptions options;
      options.batch_size = 2;
      options.workers = 4;
      options.ring_capacity = 2;
      // Unshuffled, so item 7 is read at once: the limit then bounds the shutdown alone, not
      // how far into a shuffled epoch the bad item lands (seconds on a loaded machine).
      options.shuffle = false;
      Loader loader(synthetic(5000, {7}, 10), options);
      loader.start_epoch(1);
      CHECK_THROWS_WITH_AS(
          [&] {
            while (loader.next()) {
            }
          }(),
          doctest::Contains("item 7"), Error);
    });
  }

  TEST_CASE("restarting epochs mid-way repeatedly does not leak or hang") {
    within(10000ms, [] {
      LoaderOptions options;
      options.batch_size = 3;
      options.echo_factor = 2;
      options.shuffle_buffer = 16;
      Loader loader(synthetic(500), options);
      for (int epoch = 0; epoch < 20; ++epoch) {
        loader.start_epoch(epoch);
        for (int i = 0; i < epoch % 4; ++i) REQUIRE(loader.next().has_value());
      }
      CHECK(epoch_labels(loader, 20).size() == 1000);
    });
  }
}
