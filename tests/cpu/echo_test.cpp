// Data echoing through the Loader: copy counts, placement semantics, shuffle-buffer spread.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <thread>

#include <echelon/base/json.h>
#include <echelon/data/echo.h>
#include <echelon/data/loader.h>

using namespace echelon;
using namespace echelon::data;

namespace {

std::shared_ptr<Dataset> synthetic(int64_t size, int64_t side = 6) {
  SyntheticOptions options;
  options.size = size;
  options.num_classes = 1000000;  // label == index: tests can identify every example
  options.channels = 1;
  options.height = side;
  options.width = side;
  return make_synthetic_dataset(options);
}

// Every (label, image) the loader yields in one epoch, in order.
struct Seen {
  std::vector<int64_t> labels;
  std::vector<std::vector<float>> images;
  std::vector<Batch> batches;
  LoaderStats stats;
};

Seen run_epoch(std::shared_ptr<Dataset> dataset, LoaderOptions options, int64_t epoch = 0) {
  Loader loader(dataset, options);
  loader.start_epoch(epoch);
  Seen seen;
  while (auto batch = loader.next()) {
    const auto labels = batch->labels.to_vector<int64_t>();
    const auto pixels = batch->images.to_vector<float>();
    const size_t item = pixels.size() / labels.size();
    for (size_t i = 0; i < labels.size(); ++i) {
      seen.labels.push_back(labels[i]);
      seen.images.emplace_back(pixels.begin() + i * item, pixels.begin() + (i + 1) * item);
    }
    seen.batches.push_back(*batch);
  }
  seen.stats = loader.stats();
  return seen;
}

// Upstream of 2 workers x 20 ms per item = 100 items/s, 400 items of 4x4.
std::shared_ptr<Dataset> slow_upstream() {
  SyntheticOptions slow;
  slow.size = 400;
  slow.height = slow.width = 4;
  slow.read_cost_us = 20000;
  return make_synthetic_dataset(slow);
}

LoaderOptions auto_echo_options() {
  LoaderOptions options;
  options.batch_size = 8;
  options.workers = 2;
  options.echo_auto = true;
  return options;
}

}  // namespace

TEST_SUITE("echo") {
  TEST_CASE("integer factor: every fresh example exactly e times, at every placement") {
    for (EchoPlacement placement :
         {EchoPlacement::BeforeAugment, EchoPlacement::AfterAugment, EchoPlacement::Batch}) {
      for (double e : {1.0, 3.0}) {
        LoaderOptions options;
        options.batch_size = 7;
        options.echo_factor = e;
        options.echo_at = placement;
        options.workers = 2;
        const Seen seen = run_epoch(synthetic(101), options);
        std::map<int64_t, int> counts;
        for (int64_t label : seen.labels) ++counts[label];
        CAPTURE(std::string(echo_placement_name(placement)));
        REQUIRE(counts.size() == 101);
        int wrong = 0;
        for (auto& [label, count] : counts) wrong += count != static_cast<int>(e);
        CHECK(wrong == 0);
        CHECK(seen.stats.fresh == 101);
        CHECK(seen.stats.echoed == static_cast<int64_t>(101 * (e - 1)));
        int64_t fresh_in_batches = 0;
        for (const Batch& b : seen.batches) fresh_in_batches += b.fresh;
        CHECK(fresh_in_batches == 101);
      }
    }
  }

  TEST_CASE("fractional factor: mean copies within tolerance") {
    LoaderOptions options;
    options.batch_size = 16;
    options.echo_factor = 2.3;
    const Seen seen = run_epoch(synthetic(1999), options);
    const double mean = static_cast<double>(seen.labels.size()) / 1999.0;
    CHECK(mean == doctest::Approx(2.3).epsilon(0.03));
    CHECK(seen.stats.effective_factor == doctest::Approx(mean).epsilon(1e-9));
    // echo_copies alone, over many keys.
    double total = 0;
    for (int64_t k = 0; k < 20000; ++k) total += echo_copies(1.75, 5, 0, k);
    CHECK(total / 20000 == doctest::Approx(1.75).epsilon(0.01));
  }

  TEST_CASE("before-augment copies differ, after-augment copies are identical") {
    LoaderOptions options;
    options.batch_size = 8;
    options.echo_factor = 2;
    options.augment.crop_padding = 2;
    options.augment.horizontal_flip = true;
    for (EchoPlacement placement : {EchoPlacement::BeforeAugment, EchoPlacement::AfterAugment}) {
      options.echo_at = placement;
      const Seen seen = run_epoch(synthetic(64), options);
      std::map<int64_t, std::vector<const std::vector<float>*>> copies;
      for (size_t i = 0; i < seen.labels.size(); ++i)
        copies[seen.labels[i]].push_back(&seen.images[i]);
      int identical = 0;
      for (auto& [label, list] : copies) {
        REQUIRE(list.size() == 2);
        identical += *list[0] == *list[1];
      }
      if (placement == EchoPlacement::AfterAugment) {
        CHECK(identical == 64);
      } else {
        CHECK(identical < 16);  // 25 crops x 2 flips: an equal draw is rare
      }
    }
  }

  TEST_CASE("batch echo repeats whole batches") {
    LoaderOptions options;
    options.batch_size = 5;
    options.echo_factor = 3;
    options.echo_at = EchoPlacement::Batch;
    const Seen seen = run_epoch(synthetic(23), options);
    REQUIRE(seen.batches.size() == 15);  // ceil(23 / 5) * 3
    for (size_t b = 0; b < seen.batches.size(); b += 3) {
      const auto first = seen.batches[b].labels.to_vector<int64_t>();
      CHECK(seen.batches[b].fresh == static_cast<int64_t>(first.size()));
      for (size_t r = 1; r < 3; ++r) {
        CHECK(seen.batches[b + r].labels.to_vector<int64_t>() == first);
        CHECK(seen.batches[b + r].fresh == 0);
      }
    }
  }

  TEST_CASE("the shuffle buffer spreads copies apart") {
    LoaderOptions options;
    options.batch_size = 8;
    options.echo_factor = 4;
    options.workers = 1;
    auto min_gap = [&](int64_t buffer) {
      options.shuffle_buffer = buffer;
      const Seen seen = run_epoch(synthetic(300), options);
      std::map<int64_t, std::vector<size_t>> positions;
      for (size_t i = 0; i < seen.labels.size(); ++i) positions[seen.labels[i]].push_back(i);
      double mean_gap = 0;
      for (auto& [label, p] : positions) mean_gap += static_cast<double>(p.back() - p.front()) / 3;
      return mean_gap / static_cast<double>(positions.size());
    };
    // Without a buffer the 4 copies leave back to back (gap 1); with a buffer of 64 a copy waits
    // ~64 draws on average, so the mean gap between copies of one example is far larger.
    CHECK(min_gap(0) == doctest::Approx(1.0));
    CHECK(min_gap(64) > 20.0);
  }

  TEST_CASE("a shuffle buffer larger than the epoch holds the epoch, not its capacity") {
    // `train --shuffle-buffer 100000000000` once failed with "std::bad_alloc" before any item.
    ShuffleBuffer<int> buffer(100'000'000'000, 7, 0);
    for (int i = 0; i < 5; ++i) CHECK_FALSE(buffer.add(i).has_value());
    std::multiset<int> out;
    while (const std::optional<int> item = buffer.drain()) out.insert(*item);
    CHECK(out == std::multiset<int>{0, 1, 2, 3, 4});
  }

  TEST_CASE("auto echo: the first measurement sets the factor, later ones are smoothed") {
    AutoEcho controller;
    CHECK(controller.factor() == 1.0);
    CHECK(controller.update(0, 100) == 1.0);  // not measured yet: unchanged
    CHECK(controller.measurements() == 0);
    CHECK(controller.update(100, 370) == doctest::Approx(3.7));  // at once, no warm-up ramp
    // Noisy measurements around R = 4: the running mean of the first few, never past the range
    // the measurements span (no overshoot).
    const double noisy[] = {4.3, 3.8, 4.1, 3.9, 4.2, 4.0, 3.95, 4.05};
    for (double r : noisy) {
      const double e = controller.update(100, 100 * r);
      CHECK(e >= 3.7 - 1e-12);
      CHECK(e <= 4.3 + 1e-12);
    }
    CHECK(controller.factor() == doctest::Approx(4.0).epsilon(0.03));
    // Settled: one outlier moves it a fifth of the way only.
    const double before = controller.factor();
    controller.update(100, 5000);  // R = 50, clamped to 8
    CHECK(controller.factor() == doctest::Approx(before + 0.2 * (8.0 - before)));
    for (int i = 0; i < 60; ++i) controller.update(100, 5000);
    CHECK(controller.factor() == doctest::Approx(8.0).epsilon(0.01));
    // A step down in R: e falls monotonically to 1 and never below.
    double previous = controller.factor();
    for (int i = 0; i < 60; ++i) {
      const double e = controller.update(400, 100);  // R < 1
      CHECK(e <= previous);
      CHECK(e >= 1.0);
      previous = e;
    }
    CHECK(controller.factor() == doctest::Approx(1.0).epsilon(0.01));
  }

  TEST_CASE("auto echo through the loader: e reaches R after the first consumed batch") {
    // Upstream: 2 workers x 20 ms per item = 100 items/s; consumer: 8 items per 2 ms = 4000/s,
    // so R ~= 40, and e is clamped to 8. Sleeps only overshoot, so a loaded machine lowers R: a
    // consumer step would have to take 26 ms instead of 2 to bring it under 3 (a 10 ms step
    // did, once, at load 8). The old plain EMA (0.2) from e = 1 would be at 2.4 after one step.
    Loader loader(slow_upstream(), auto_echo_options());
    loader.start_epoch(0);
    std::vector<double> factors;
    for (int step = 0; step < 4; ++step) {
      REQUIRE(loader.next().has_value());
      factors.push_back(loader.stats().factor);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    CHECK(factors[0] == 1.0);  // no consumer time measured before the first batch comes back
    CHECK(factors[1] >= 3.0);  // the first measurement: set at once
    CHECK(factors[3] >= 3.0);
  }

  TEST_CASE("auto echo through the loader: a slow first step fades out") {
    // As above (R ~= 40), but the first consumer step takes 1 s (think CUDA warm-up): measured
    // alone it says R < 1. Per-batch measurements let later steps outvote it; a running mean over
    // the epoch would still read R ~= 1.5 after 20 steps (1.04 s for 160 items).
    Loader loader(slow_upstream(), auto_echo_options());
    loader.start_epoch(0);
    for (int step = 0; step < 20; ++step) {
      REQUIRE(loader.next().has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(step == 0 ? 1000 : 2));
    }
    REQUIRE(loader.next().has_value());
    CHECK(loader.stats().factor >= 3.0);
  }

  TEST_CASE("auto echo through the loader: an epoch still counts every fresh example once") {
    SyntheticOptions slow;
    slow.size = 120;
    slow.height = slow.width = 4;
    slow.num_classes = 1000;
    slow.read_cost_us = 1000;
    LoaderOptions options;
    options.batch_size = 4;
    options.echo_auto = true;
    Loader loader(make_synthetic_dataset(slow), options);
    loader.start_epoch(0);
    std::set<int64_t> distinct;
    int64_t total = 0;
    while (auto batch = loader.next()) {
      for (int64_t label : batch->labels.to_vector<int64_t>()) distinct.insert(label);
      total += batch->labels.size(0);
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // a fast consumer
    }
    const LoaderStats stats = loader.stats();
    CHECK(stats.echo_auto);
    CHECK(distinct.size() == 120);
    CHECK(stats.fresh == 120);
    CHECK(total == stats.fresh + stats.echoed);
    CHECK(stats.factor >= 1.0);
    CHECK(stats.factor <= 8.0);
    CHECK(stats.upstream_rate > 0);
    CHECK(stats.downstream_rate > 0);
    const json::Value doc = stats.to_json();
    CHECK(doc.at("placement").as_string() == "after-augment");
    CHECK(doc.at("auto").as_bool());
    CHECK(doc.at("fresh").as_int() == stats.fresh);
    CHECK(doc.at("factor").as_double() == stats.factor);  // full precision, not 6 digits
    REQUIRE(doc.at("stages").size() == stats.stages.size());
    CHECK(doc.at("stages").as_array()[1].at("name").as_string() == stats.stages[1].name);
    CHECK(json::parse(doc.dump()) == doc);
  }
}
