// The loader's direct path (inline and one-thread drivers, in-memory data: Dataset::read_into
// writes each example straight into its batch slot) against the per-example stages it replaces
// (forced by a trace hook, which the direct path does not serve): the same batches bit for bit,
// the same counts, skips and error messages; and the AVX-512 uint8 -> float conversion against
// the scalar expression.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/data/transforms.h>

using namespace echelon;
using namespace echelon::data;

namespace {

// 23 examples of 3 x 9 x 7, every pixel recognisable, labels 0..3.
std::shared_ptr<Dataset> memory_set() {
  LabeledImages set;
  set.images = Tensor::empty({23, 3, 9, 7}, kUInt8);
  uint8_t* pixels = set.images.data<uint8_t>();
  for (int64_t i = 0; i < set.images.numel(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 251);
  set.labels = Tensor::empty({23}, kInt64);
  for (int64_t i = 0; i < 23; ++i) set.labels.data<int64_t>()[i] = (i * 7) % 4;
  set.num_classes = 4;
  return make_memory_dataset(set, "memory");
}

// Forwards to an in-memory set, counting read() and read_into() calls. `bad` examples fail to
// decode (read_into too); own_read_into: false takes Dataset's default read_into.
class Counting final : public Dataset {
 public:
  Counting(std::shared_ptr<Dataset> inner, bool own_read_into, std::set<int64_t> bad = {})
      : inner_(std::move(inner)), own_read_into_(own_read_into), bad_(std::move(bad)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  Shape image_shape() const override { return inner_->image_shape(); }
  std::string name() const override { return inner_->name(); }
  bool in_memory() const override { return true; }
  RawRecord read(int64_t index) const override {
    reads.fetch_add(1);
    return inner_->read(index);
  }
  Image decode(const RawRecord& record) const override {
    check(record.index);
    return inner_->decode(record);
  }
  bool fuses_decode_augment(const AugmentOptions& augment) const override {
    return inner_->fuses_decode_augment(augment);
  }
  void decode_augment(const RawRecord& record, const AugmentOptions& augment, const AugmentKey& key,
                      std::vector<float>& out, int64_t& height, int64_t& width) const override {
    check(record.index);
    inner_->decode_augment(record, augment, key, out, height, width);
  }
  bool reads_into() const override { return true; }
  int64_t read_into(int64_t index, const AugmentOptions& augment, const AugmentKey& key, float* out,
                    int64_t out_size) const override {
    read_intos.fetch_add(1);
    if (!own_read_into_) return Dataset::read_into(index, augment, key, out, out_size);
    check(index);
    return inner_->read_into(index, augment, key, out, out_size);
  }
  mutable std::atomic<int64_t> reads{0}, read_intos{0};

 private:
  void check(int64_t index) const {
    if (bad_.count(index)) ECH_FAIL("example ", index, " is corrupt");
  }
  std::shared_ptr<Dataset> inner_;
  bool own_read_into_;
  std::set<int64_t> bad_;
};

struct Epoch {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int64_t>> labels;
  std::vector<int64_t> fresh, index;
  LoaderStats stats;
  std::string error;
};

// One epoch; `stages` forces the per-example stages (a trace hook: no direct path).
Epoch run_epoch(const std::shared_ptr<Dataset>& dataset, LoaderOptions options, bool stages) {
  if (stages) options.on_work = [](const std::string&, int, int64_t, auto, auto) {};
  Loader loader(dataset, options);
  loader.start_epoch(3);
  Epoch epoch;
  try {
    while (auto batch = loader.next()) {
      epoch.images.push_back(batch->images.to_vector<float>());
      epoch.labels.push_back(batch->labels.to_vector<int64_t>());
      epoch.fresh.push_back(batch->fresh);
      epoch.index.push_back(batch->index);
    }
  } catch (const Error& e) {
    epoch.error = e.what();
  }
  epoch.stats = loader.stats();
  return epoch;
}

void check_same(const Epoch& direct, const Epoch& staged) {
  CHECK(direct.error == staged.error);
  CHECK(direct.labels == staged.labels);
  CHECK(direct.images == staged.images);
  CHECK(direct.fresh == staged.fresh);
  CHECK(direct.index == staged.index);
  CHECK(direct.stats.fresh == staged.stats.fresh);
  CHECK(direct.stats.echoed == staged.stats.echoed);
  CHECK(direct.stats.skipped == staged.stats.skipped);
  CHECK(direct.stats.batches == staged.stats.batches);
  REQUIRE(direct.stats.stages.size() == staged.stats.stages.size());
  for (size_t i = 0; i < staged.stats.stages.size(); ++i) {
    const LoaderStageStats& s = staged.stats.stages[i];
    const LoaderStageStats& d = direct.stats.stages[i];
    CAPTURE(s.name);
    CHECK(d.name == s.name);
    CHECK(d.items == s.items);
    CHECK(d.busy_s >= 0);
  }
}

}  // namespace

TEST_SUITE("concurrency_loader_direct") {
  TEST_CASE("direct batches are the per-example stages' batches, bit for bit") {
    for (const int workers : {0, 1})
      for (const bool augment : {false, true})
        for (const int64_t batch_size : {5, 23, 64})
          for (const bool drop_last : {false, true})
            for (const bool shuffle : {true, false}) {
              CAPTURE(workers);
              CAPTURE(augment);
              CAPTURE(batch_size);
              CAPTURE(drop_last);
              CAPTURE(shuffle);
              LoaderOptions options;
              options.workers = workers;
              options.batch_size = batch_size;
              options.drop_last = drop_last;
              options.shuffle = shuffle;
              options.seed = 11;
              options.augment.mean = {0.4f, 0.5f, 0.6f};
              options.augment.std = {0.2f, 0.25f, 0.3f};
              if (augment) {
                options.augment.crop_padding = 2;
                options.augment.horizontal_flip = true;
              }
              const auto counted = std::make_shared<Counting>(memory_set(), true);
              const Epoch direct = run_epoch(counted, options, false);
              // The direct path ran: no record was read, every example went into its slot.
              CHECK(counted->reads.load() == 0);
              CHECK(counted->read_intos.load() == 23);
              const Epoch staged = run_epoch(counted, options, true);
              CHECK(counted->read_intos.load() == 23);
              CHECK(counted->reads.load() == 23);
              REQUIRE(staged.error.empty());
              CHECK(staged.images.size() ==
                    static_cast<size_t>(drop_last ? 23 / batch_size
                                                  : (23 + batch_size - 1) / batch_size));
              check_same(direct, staged);
            }
  }

  TEST_CASE("direct: echo factor 1 at every placement, Dataset's default read_into") {
    for (const EchoPlacement at :
         {EchoPlacement::AfterAugment, EchoPlacement::Batch, EchoPlacement::BeforeAugment}) {
      CAPTURE(echo_placement_name(at));
      LoaderOptions options;
      options.workers = 0;
      options.batch_size = 4;
      options.seed = 5;
      options.echo_at = at;
      options.augment.horizontal_flip = true;
      const auto counted = std::make_shared<Counting>(memory_set(), false);
      const Epoch direct = run_epoch(counted, options, false);
      // Echo before augmentation splits the fused stage: never direct.
      CHECK(counted->read_intos.load() == (at == EchoPlacement::BeforeAugment ? 0 : 23));
      check_same(direct, run_epoch(counted, options, true));
      CHECK(direct.stats.fresh == 23);
    }
  }

  TEST_CASE("direct: bad samples skipped or failing as the per-example stages do") {
    for (const bool own : {true, false})
      for (const OnBadSample on_bad : {OnBadSample::Skip, OnBadSample::Fail}) {
        CAPTURE(own);
        const bool skip = on_bad == OnBadSample::Skip;
        CAPTURE(skip);
        LoaderOptions options;
        options.workers = 0;
        options.batch_size = 4;
        options.seed = 9;
        options.on_bad_sample = on_bad;
        const auto counted =
            std::make_shared<Counting>(memory_set(), own, std::set<int64_t>{0, 7, 8, 22});
        const Epoch direct = run_epoch(counted, options, false);
        CHECK(counted->read_intos.load() > 0);
        const Epoch staged = run_epoch(counted, options, true);
        check_same(direct, staged);
        if (skip) {
          CHECK(direct.stats.skipped == 4);
          CHECK(direct.labels.size() == 5);  // 19 examples in batches of 4
        } else {
          CHECK(direct.error.find("stage 'decode+augment' failed on item") != std::string::npos);
          CHECK(direct.error.find("is corrupt") != std::string::npos);
        }
      }
  }

  TEST_CASE("read_into: read + decode_augment's floats and label; size and index checks") {
    const auto dataset = memory_set();
    AugmentOptions augment;
    augment.mean = {0.3f, 0.6f, 0.1f};
    augment.std = {0.2f, 0.4f, 0.5f};
    for (const bool crop_flip : {false, true}) {
      CAPTURE(crop_flip);
      augment.crop_padding = crop_flip ? 3 : 0;
      augment.horizontal_flip = crop_flip;
      for (int64_t index = 0; index < 23; ++index) {
        const AugmentKey key{7, 2, index, 0};
        std::vector<float> expected;
        int64_t height = 0, width = 0;
        const RawRecord record = dataset->read(index);
        dataset->decode_augment(record, augment, key, expected, height, width);
        std::vector<float> direct(3 * 9 * 7, -1.0f);
        CHECK(dataset->read_into(index, augment, key, direct.data(), 3 * 9 * 7) == record.label);
        CHECK(direct == expected);
      }
    }
    std::vector<float> out(3 * 9 * 7);
    CHECK_THROWS_WITH_AS(dataset->read_into(2, augment, {}, out.data(), 3 * 9 * 7 - 1),
                         doctest::Contains("memory[2]: augmented image is 189 values"), Error);
    augment = {};
    CHECK_THROWS_WITH_AS(dataset->read_into(2, augment, {}, out.data(), 3 * 9 * 7 + 1),
                         doctest::Contains("memory[2]: image is 189 values"), Error);
    CHECK_THROWS_WITH_AS(dataset->read_into(23, augment, {}, out.data(), 3 * 9 * 7),
                         doctest::Contains("index 23 out of range"), Error);
  }

  TEST_CASE("to_float_plane: the scalar expression's bits, every byte, every tail length") {
    std::vector<uint8_t> bytes(256 + 40);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 5);
    for (const ChannelNormalise channel :
         {ChannelNormalise{1.0f / 255.0f, 0.0f},
          ChannelNormalise{1.0f / (255.0f * 0.3530f), -0.2860f / 0.3530f},
          ChannelNormalise{0.7f, -3.25f}})
      for (int64_t offset = 0; offset < 3; ++offset)
        for (int64_t n = 0; n <= 256 + 37; n += (n < 40 ? 1 : 37)) {
          CAPTURE(offset);
          CAPTURE(n);
          std::vector<float> out(static_cast<size_t>(n) + 1, 99.0f), expected(out);
          for (int64_t p = 0; p < n; ++p)
            expected[p] = static_cast<float>(bytes[offset + p]) * channel.scale + channel.shift;
          to_float_plane(bytes.data() + offset, n, channel, out.data());
          CHECK(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)) == 0);
        }
  }
}
