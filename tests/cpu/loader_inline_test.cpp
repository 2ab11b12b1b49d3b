// The loader's inline mode (workers = 0: every stage on the thread calling next()) against the
// threaded pipeline with one worker per stage (deterministic: FIFO rings, stages emit in input
// order): the same batches bit for bit over every echo placement, fractional factors, the shuffle
// buffer, drop_last, fused and separate decode + augment, skipped bad samples; the same error
// messages; stats, the trace hook, request_stop and restarting epochs.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/data/registry.h>

using namespace echelon;
using namespace echelon::data;
using namespace std::chrono_literals;

namespace {

// 23 examples of 3 x 9 x 7, every pixel recognisable; the in-memory set fuses decode + augment.
std::shared_ptr<Dataset> memory_set() {
  LabeledImages set;
  set.images = Tensor::empty({23, 3, 9, 7}, kUInt8);
  uint8_t* pixels = set.images.data<uint8_t>();
  for (int64_t i = 0; i < set.images.numel(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 251);
  set.labels = Tensor::empty({23}, kInt64);
  for (int64_t i = 0; i < 23; ++i) set.labels.data<int64_t>()[i] = i % 4;
  set.num_classes = 4;
  return make_memory_dataset(set, "memory");
}

// Label == index, so a batch's labels name its examples; `corrupt` fail to decode.
std::shared_ptr<Dataset> synthetic(int64_t size, std::vector<int64_t> corrupt = {},
                                   double read_cost_us = 0) {
  SyntheticOptions options;
  options.size = size;
  options.num_classes = 1000000;
  options.channels = 2;
  options.height = 3;
  options.width = 5;
  options.corrupt_indices = std::move(corrupt);
  options.read_cost_us = read_cost_us;
  return make_synthetic_dataset(options);
}

// Forwards to an inner data set and records the order of its prefetch() and read() calls.
class RecordingDataset final : public Dataset {
 public:
  explicit RecordingDataset(std::shared_ptr<Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  Shape image_shape() const override { return inner_->image_shape(); }
  std::string name() const override { return inner_->name(); }
  bool in_memory() const override { return inner_->in_memory(); }
  RawRecord read(int64_t index) const override {
    reads.push_back(index);
    return inner_->read(index);
  }
  Image decode(const RawRecord& record) const override { return inner_->decode(record); }
  void prefetch(int64_t index) const override {
    prefetches.push_back(index);
    inner_->prefetch(index);
  }
  mutable std::vector<int64_t> reads, prefetches;

 private:
  std::shared_ptr<Dataset> inner_;
};

struct Epoch {
  std::vector<std::vector<float>> images;  // per batch: (B, C, H, W) flattened
  std::vector<std::vector<int64_t>> labels;
  std::vector<int64_t> fresh;  // per batch
  LoaderStats stats;
  std::string error;  // the message next() threw, if it did
};

Epoch run_epoch(const std::shared_ptr<Dataset>& dataset, const LoaderOptions& options,
                int64_t epoch_number = 1) {
  Loader loader(dataset, options);
  loader.start_epoch(epoch_number);
  Epoch epoch;
  try {
    while (auto batch = loader.next()) {
      epoch.images.push_back(batch->images.to_vector<float>());
      epoch.labels.push_back(batch->labels.to_vector<int64_t>());
      epoch.fresh.push_back(batch->fresh);
    }
  } catch (const Error& e) {
    epoch.error = e.what();
  }
  epoch.stats = loader.stats();
  return epoch;
}

// Inline and threaded (one worker) epochs of the same options: batches, counts, stage items.
void check_same_epoch(const std::shared_ptr<Dataset>& dataset, LoaderOptions options) {
  options.workers = 1;
  const Epoch threaded = run_epoch(dataset, options);
  options.workers = 0;
  const Epoch inline_epoch = run_epoch(dataset, options);
  REQUIRE(threaded.error.empty());
  REQUIRE(inline_epoch.error.empty());
  REQUIRE(threaded.images.size() >= 3);
  CHECK(inline_epoch.labels == threaded.labels);
  CHECK(inline_epoch.images == threaded.images);
  CHECK(inline_epoch.fresh == threaded.fresh);
  CHECK(inline_epoch.stats.fresh == threaded.stats.fresh);
  CHECK(inline_epoch.stats.echoed == threaded.stats.echoed);
  CHECK(inline_epoch.stats.skipped == threaded.stats.skipped);
  CHECK(inline_epoch.stats.batches == threaded.stats.batches);
  CHECK(inline_epoch.stats.effective_factor == threaded.stats.effective_factor);
  REQUIRE(inline_epoch.stats.stages.size() == threaded.stats.stages.size());
  for (size_t i = 0; i < threaded.stats.stages.size(); ++i) {
    const LoaderStageStats& t = threaded.stats.stages[i];
    const LoaderStageStats& n = inline_epoch.stats.stages[i];
    CAPTURE(t.name);
    CHECK(n.name == t.name);
    CHECK(n.items == t.items);
    CHECK(n.workers == 0);
    CHECK(n.ring_capacity == 0);
  }
}

LoaderOptions augmenting_options() {
  LoaderOptions options;
  options.batch_size = 5;
  options.seed = 42;
  options.augment.crop_padding = 2;
  options.augment.horizontal_flip = true;
  options.augment.mean = {0.4f, 0.5f, 0.6f};
  options.augment.std = {0.2f, 0.25f, 0.3f};
  return options;
}

}  // namespace

TEST_SUITE("concurrency_loader_inline") {
  TEST_CASE("inline batches are the threaded loader's, bit for bit") {
    const auto dataset = memory_set();
    struct Echo {
      double factor;
      EchoPlacement at;
    };
    for (const Echo echo :
         {Echo{1.0, EchoPlacement::AfterAugment}, Echo{2.0, EchoPlacement::BeforeAugment},
          Echo{1.6, EchoPlacement::BeforeAugment}, Echo{2.0, EchoPlacement::AfterAugment},
          Echo{1.4, EchoPlacement::AfterAugment}, Echo{3.0, EchoPlacement::Batch},
          Echo{2.5, EchoPlacement::Batch}})
      for (const int64_t shuffle_buffer : {0, 7})
        for (const bool drop_last : {false, true})
          for (const bool fuse : {true, false}) {
            CAPTURE(echo.factor);
            CAPTURE(echo_placement_name(echo.at));
            CAPTURE(shuffle_buffer);
            CAPTURE(drop_last);
            CAPTURE(fuse);
            LoaderOptions options = augmenting_options();
            options.echo_factor = echo.factor;
            options.echo_at = echo.at;
            options.shuffle_buffer = shuffle_buffer;
            options.drop_last = drop_last;
            options.fuse_decode_augment = fuse;
            check_same_epoch(dataset, options);
          }
  }

  TEST_CASE("inline: unshuffled order, every example once, the fused stage's name") {
    LoaderOptions options = augmenting_options();
    options.workers = 0;
    options.shuffle = false;
    const Epoch epoch = run_epoch(memory_set(), options);
    std::vector<int64_t> labels;
    for (const auto& batch : epoch.labels) labels.insert(labels.end(), batch.begin(), batch.end());
    REQUIRE(labels.size() == 23);
    for (int64_t i = 0; i < 23; ++i) CHECK(labels[static_cast<size_t>(i)] == i % 4);
    CHECK(epoch.labels.back().size() == 3);  // 23 = 4 x 5 + 3
    std::vector<std::string> names;
    for (const LoaderStageStats& stage : epoch.stats.stages) names.push_back(stage.name);
    CHECK(names ==
          std::vector<std::string>{"source", "read", "decode+augment", "shuffle", "batch"});
  }

  TEST_CASE("inline skips the same bad samples and fails with the same message") {
    LoaderOptions options;
    options.batch_size = 4;
    options.seed = 7;
    options.shuffle_buffer = 5;
    options.on_bad_sample = OnBadSample::Skip;
    check_same_epoch(synthetic(41, {3, 13, 40}), options);
    options.workers = 0;
    const Epoch skipping = run_epoch(synthetic(41, {3, 13, 40}), options);
    CHECK(skipping.stats.skipped == 3);
    CHECK(skipping.stats.fresh == 38);

    options.on_bad_sample = OnBadSample::Fail;
    for (const bool shuffle : {false, true}) {
      CAPTURE(shuffle);
      options.shuffle = shuffle;
      options.workers = 1;
      const Epoch threaded = run_epoch(synthetic(41, {13, 30}), options);
      options.workers = 0;
      const Epoch inline_epoch = run_epoch(synthetic(41, {13, 30}), options);
      CHECK(threaded.error.find("stage 'decode'") != std::string::npos);
      CHECK(inline_epoch.error.find("stage 'decode'") != std::string::npos);
      CHECK(inline_epoch.error.find("synthetic[") != std::string::npos);
      CHECK(inline_epoch.error == threaded.error);
      if (!shuffle) CHECK(inline_epoch.error.find("item 13") != std::string::npos);
    }
  }

  TEST_CASE("inline refuses echo = auto and bad worker counts, naming the option") {
    LoaderOptions options;
    options.workers = 0;
    options.set_echo("auto");
    CHECK_THROWS_WITH_AS(Loader(synthetic(5), options),
                         doctest::Contains("echo = auto needs worker threads"), Error);
    options.set_echo("2");
    CHECK_NOTHROW(Loader(synthetic(5), options));
    options.workers = -1;
    CHECK_THROWS_WITH_AS(Loader(synthetic(5), options), doctest::Contains("workers -1"), Error);
  }

  TEST_CASE("inline stats: busy time per stage on one thread, and the trace hook") {
    std::mutex mutex;
    std::map<std::string, int64_t> traced;
    std::set<std::thread::id> tracing_threads;
    LoaderOptions options;
    options.batch_size = 8;
    options.workers = 0;
    options.shuffle_buffer = 4;
    options.fuse_decode_augment = false;
    options.on_work = [&](const std::string& stage, int worker, int64_t,
                          std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
      std::lock_guard<std::mutex> lock(mutex);
      CHECK(worker == 0);
      CHECK(end >= start);
      ++traced[stage];
      tracing_threads.insert(std::this_thread::get_id());
    };
    const Epoch epoch = run_epoch(synthetic(40, {}, /*read_cost_us=*/200), options);
    CHECK(tracing_threads == std::set<std::thread::id>{std::this_thread::get_id()});
    CHECK(traced ==
          std::map<std::string, int64_t>{
              {"read", 40}, {"decode", 40}, {"augment", 40}, {"shuffle", 40}, {"batch", 5}});
    double read_busy = 0;
    for (const LoaderStageStats& stage : epoch.stats.stages)
      if (stage.name == "read") read_busy = stage.busy_s;
    CHECK(read_busy >= 40 * 150e-6);  // 40 reads of a slept 200 us, inside next()
    CHECK(epoch.stats.upstream_rate > 0);
    CHECK(epoch.stats.consumer_stall_s >= read_busy);
  }

  TEST_CASE(
      "threaded, in memory: the decode workers read, the batch thread shuffles; all counted") {
    // Threadless stages (data/loader.h) keep their counters and trace calls: the read on the
    // decode workers' threads, the shuffle buffer on the batch thread.
    std::mutex mutex;
    std::map<std::string, int64_t> traced;
    std::map<std::string, std::set<std::thread::id>> threads_of;
    LoaderOptions options;
    options.batch_size = 8;
    options.workers = 2;
    options.shuffle_buffer = 4;
    options.fuse_decode_augment = false;
    options.on_work = [&](const std::string& stage, int worker, int64_t,
                          std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
      std::lock_guard<std::mutex> lock(mutex);
      CHECK(worker >= 0);
      CHECK(worker < 2);
      CHECK(end >= start);
      ++traced[stage];
      threads_of[stage].insert(std::this_thread::get_id());
    };
    const Epoch epoch = run_epoch(synthetic(40), options);  // in memory: no read cost
    REQUIRE(epoch.error.empty());
    CHECK(traced ==
          std::map<std::string, int64_t>{
              {"read", 40}, {"decode", 40}, {"augment", 40}, {"shuffle", 40}, {"batch", 5}});
    CHECK(threads_of["read"] == threads_of["decode"]);  // each worker reads what it decodes
    CHECK(threads_of["shuffle"] == threads_of["batch"]);
    CHECK(threads_of["batch"].size() == 1);
    CHECK(threads_of["read"].count(*threads_of["batch"].begin()) == 0);
    CHECK(threads_of["read"].count(std::this_thread::get_id()) == 0);
    for (const LoaderStageStats& stage : epoch.stats.stages) {
      CAPTURE(stage.name);
      CHECK(stage.stall_s >= 0);  // the decode workers' wait excludes the reads they did
      if (stage.name == "source" || stage.name == "read" || stage.name == "decode")
        CHECK(stage.items == 40);
      if (stage.name == "source" || stage.name == "read" || stage.name == "shuffle")
        CHECK(stage.ring_capacity == 0);  // no thread boundary, no ring
    }
    CHECK(epoch.stats.upstream_rate > 0);  // read_stats has its busy time: echo auto works
  }

  TEST_CASE("workers = 1 in memory: every stage on one loader thread, batches over one ring") {
    std::mutex mutex;
    std::set<std::thread::id> tracing_threads;
    std::map<std::string, int64_t> traced;
    LoaderOptions options;
    options.batch_size = 8;
    options.workers = 1;
    options.shuffle_buffer = 4;
    options.echo_factor = 1.5;
    options.on_work = [&](const std::string& stage, int worker, int64_t,
                          std::chrono::steady_clock::time_point,
                          std::chrono::steady_clock::time_point) {
      std::lock_guard<std::mutex> lock(mutex);
      CHECK(worker == 0);
      ++traced[stage];
      tracing_threads.insert(std::this_thread::get_id());
    };
    const Epoch epoch = run_epoch(synthetic(40), options);
    REQUIRE(epoch.error.empty());
    CHECK(tracing_threads.size() == 1);
    CHECK(tracing_threads.count(std::this_thread::get_id()) == 0);  // not next()'s thread
    CHECK(traced.at("read") == 40);
    CHECK(traced.at("decode") == 40);
    CHECK(traced.at("batch") == static_cast<int64_t>(epoch.labels.size()));
    for (const LoaderStageStats& stage : epoch.stats.stages) {
      CAPTURE(stage.name);
      CHECK(stage.ring_capacity == (stage.name == "batch" ? 2 : 0));  // prefetch_batches
    }
    CHECK(epoch.stats.upstream_rate > 0);
  }

  TEST_CASE("inline: request_stop from another thread ends next(), restarts are clean") {
    LoaderOptions options;
    options.batch_size = 4;
    options.workers = 0;
    Loader loader(synthetic(400, {}, /*read_cost_us=*/1000), options);
    loader.start_epoch(0);
    REQUIRE(loader.next());
    auto stopper = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(5ms);
      loader.request_stop();
    });
    int64_t more = 0;
    const auto start = std::chrono::steady_clock::now();
    while (loader.next()) ++more;
    stopper.get();
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK(more < 99);
    CHECK_FALSE(loader.next());

    // Restarting (also mid-epoch) gives each epoch's batches as a fresh loader does.
    LoaderOptions quick = options;
    quick.seed = 3;
    Loader restarted(synthetic(30), quick);
    restarted.start_epoch(5);
    REQUIRE(restarted.next());
    restarted.start_epoch(2);
    std::vector<std::vector<int64_t>> labels;
    while (auto batch = restarted.next()) labels.push_back(batch->labels.to_vector<int64_t>());
    CHECK(labels == run_epoch(synthetic(30), quick, 2).labels);
    CHECK(labels != run_epoch(synthetic(30), quick, 3).labels);
  }

  TEST_CASE("inline prefetches each example two reads before reading it; prefetch is a hint") {
    const auto recording = std::make_shared<RecordingDataset>(memory_set());
    LoaderOptions options;
    options.batch_size = 5;
    options.workers = 0;
    options.seed = 9;
    const Epoch epoch = run_epoch(recording, options);
    CHECK(epoch.error.empty());
    REQUIRE(recording->reads.size() == 23);
    // Shuffled: the reads are not in index order, and every prefetch is two reads ahead.
    CHECK_FALSE(std::is_sorted(recording->reads.begin(), recording->reads.end()));
    CHECK(recording->prefetches ==
          std::vector<int64_t>(recording->reads.begin() + 2, recording->reads.end()));
    // The batches are the ones a data set without the hint gives.
    CHECK(epoch.images == run_epoch(memory_set(), options).images);
    // Out of range it does nothing (no read, no error), also through a --limit prefix.
    const auto memory = memory_set();
    for (const int64_t index : {int64_t{-1}, int64_t{23}, int64_t{1} << 40})
      CHECK_NOTHROW(memory->prefetch(index));
    const auto inner = std::make_shared<RecordingDataset>(memory_set());
    const auto limited = take_prefix(inner, 4);  // as --limit-train 4
    limited->prefetch(2);
    limited->prefetch(7);
    CHECK(inner->prefetches == std::vector<int64_t>{2});
    CHECK(inner->reads.empty());
  }
}
