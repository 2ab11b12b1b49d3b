// Residual blocks as four pipeline layers (BlockPiece, Sequential::with_split_blocks and
// join_split_blocks, PipelineOptions::split_blocks): the same parameters under the same names,
// bit-identical forward, backward and training, and pipeline cuts inside a block.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/layers/basic_block.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/optim.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/balance.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {

// ResNet-20 on (N, 2, 8, 8): 15 layers, 9 blocks (two with the stride-2 option-A shortcut).
std::shared_ptr<Sequential> small_resnet() {
  return make_model("resnet20", 2, 5, 11, 8);
}

Tensor images(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return ops::randn({n, 2, 8, 8}, gen);
}

Tensor labels(int64_t n) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(i * 3 % 5);
  return Tensor::from_vector<int64_t>(values, {n});
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<float> x = a.contiguous().to_vector<float>();
  const std::vector<float> y = b.contiguous().to_vector<float>();
  return x == y;
}

// Every entry of two state dicts (same keys in the same order) bit for bit.
void check_states_equal(const StateDict& got, const StateDict& want) {
  REQUIRE(got.keys() == want.keys());
  for (const auto& entry : want) {
    const std::string& name = entry.first;
    const Tensor& tensor = entry.second;
    INFO(name);
    if (tensor.dtype() == DType::Float32)
      CHECK(bit_equal(got.at(name), tensor));
    else
      CHECK(got.at(name).to_vector<int64_t>() == tensor.to_vector<int64_t>());
  }
}

std::vector<data::Batch> batches(int count, int64_t size) {
  std::vector<data::Batch> out;
  for (int i = 0; i < count; ++i) {
    data::Batch b;
    b.images = images(size, 100 + static_cast<uint64_t>(i));
    b.labels = labels(size);
    b.index = i;
    b.fresh = size;
    out.push_back(b);
  }
  return out;
}

SGDOptions sgd_options() {
  SGDOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  return sgd;
}

}  // namespace

TEST_SUITE("split_blocks") {
  TEST_CASE("each block becomes four layers under its name, sharing its parameters") {
    auto model = small_resnet();
    auto split = model->with_split_blocks();
    REQUIRE(model->size() == 15);
    REQUIRE(split->size() == 42);  // 9 blocks, three more layers each
    // Stem 0-2, then block b's steps at 3 + 4b .. 6 + 4b, all named like the block.
    for (size_t i = 3; i <= 6; ++i) CHECK(split->named_children()[i].first == "3");
    CHECK(split->named_children()[38].first == "11");
    CHECK(split->named_children()[39].first == "12");
    CHECK(split->named_children()[41].first == "14");
    CHECK(split->at(3)->describe() == "BasicBlock(16, 16, stride=1) conv1");
    CHECK(split->at(6)->describe() == "BasicBlock(16, 16, stride=1) bn2+sum");
    const StateDict whole = model->state_dict(), pieces = split->state_dict();
    REQUIRE(pieces.keys() == whole.keys());  // checkpoints keep their names and order
    for (const auto& entry : whole) {
      INFO(entry.first);
      CHECK(pieces.at(entry.first).same(entry.second));
    }
    // Joined back: the model's own layer objects; a slice ending inside block 2 (layers 11-14)
    // keeps that block's first step alone, the next slice its other three as one piece.
    auto joined = split->join_split_blocks();
    REQUIRE(joined->size() == 15);
    for (size_t i = 0; i < 15; ++i) CHECK(joined->at(i) == model->at(i));
    auto part = split->slice(0, 12)->join_split_blocks();
    REQUIRE(part->size() == 6);
    CHECK(part->at(4) == model->at(4));
    CHECK(part->at(5)->describe() == "BasicBlock(16, 16, stride=1) conv1");
    CHECK(part->named_children()[5].first == "5");
    auto rest = split->slice(12, 42)->join_split_blocks();
    REQUIRE(rest->size() == 10);
    CHECK(rest->at(0)->describe() == "BasicBlock(16, 16, stride=1) bn1..bn2+sum");
    CHECK(rest->at(1) == model->at(6));
    // A model without residual blocks is unchanged.
    CHECK(make_model("lenet5", 1, 10, 1)->with_split_blocks()->size() == 12);
  }

  TEST_CASE("the pieces compute the blocks' forward and backward bit for bit") {
    auto model = small_resnet(), twin = small_resnet();
    auto split = twin->with_split_blocks();
    const Tensor x = images(4, 1);
    Tensor loss_whole = cross_entropy(model->forward(x), labels(4));
    Tensor loss_split = cross_entropy(split->forward(x), labels(4));
    CHECK(loss_whole.item<float>() == loss_split.item<float>());
    backward(loss_whole);
    backward(loss_split);
    const NamedTensors a = model->named_parameters(), b = twin->named_parameters();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(bit_equal(a[i].second.grad(), b[i].second.grad()));
    }
    check_states_equal(twin->state_dict(), model->state_dict());  // running statistics too
    model->eval();
    split->eval();
    CHECK(bit_equal(model->forward(x), split->forward(x)));
  }

  TEST_CASE("a piece fed anything but the previous piece's output names its block") {
    auto split = small_resnet()->with_split_blocks();
    CHECK_THROWS_WITH_AS(split->at(4)->forward(images(2, 3)),
                         doctest::Contains("BasicBlock(16, 16, stride=1) bn1"), Error);
    CHECK_THROWS_WITH_AS(
        BlockPiece(std::dynamic_pointer_cast<BasicBlock>(small_resnet()->at(3)), 2, 1),
        doctest::Contains("steps [2, 1]"), Error);
  }

  TEST_CASE("pieces joined from any cut compute the block bit for bit") {
    // Every way of cutting block 0 (layers 3-6) in two or three, joined per partition as the
    // pipeline does, runs what the whole block runs.
    auto model = small_resnet(), twin = small_resnet();
    auto split = twin->with_split_blocks();
    const Tensor x = images(3, 5);
    const Tensor want = model->slice(0, 4)->forward(x);
    for (size_t a = 4; a <= 6; ++a)
      for (size_t b = a; b <= 6; ++b) {
        CAPTURE(a);
        CAPTURE(b);
        Tensor h = split->slice(0, a)->join_split_blocks()->forward(x);
        if (b > a) h = split->slice(a, b)->join_split_blocks()->forward(h);
        h = split->slice(b, 7)->join_split_blocks()->forward(h);
        CHECK(bit_equal(h, want));
      }
  }

  TEST_CASE("a pipeline cut inside a block trains as ordinary training does (sequential)") {
    const std::vector<data::Batch> data = batches(4, 6);
    auto reference = small_resnet();
    SGD sgd(reference->named_parameters(), sgd_options());
    std::vector<float> want;
    for (const data::Batch& batch : data) {
      Tensor loss = cross_entropy(reference->forward(batch.images), batch.labels);
      want.push_back(loss.item<float>());
      backward(loss);
      sgd.step();
      sgd.zero_grad();
    }
    // Cuts 8 and 13: inside blocks 1 and 2 (block b's steps are layers 3 + 4b .. 6 + 4b).
    PipelineOptions options;
    options.ppv = "8,13";
    options.split_blocks = true;
    options.schedule = ScheduleKind::Sequential;
    std::vector<float> got;
    options.on_result = [&](const BatchResult& r) { got.push_back(static_cast<float>(r.loss)); };
    PipelineEngine engine(small_resnet(), sgd_options(), Device::cpu(), options);
    for (const data::Batch& batch : data) engine.train_step(batch);
    engine.finish_epoch();
    CHECK(got == want);
    check_states_equal(engine.model().state_dict(), reference->state_dict());
    CHECK(engine.model().size() == 15);  // the model itself keeps its blocks
    // Without split_blocks the cuts index whole layers: 20 lies beyond a 15-layer model.
    PipelineOptions whole = options;
    whole.ppv = "8,20";
    whole.split_blocks = false;
    CHECK_THROWS_WITH_AS(PipelineEngine(small_resnet(), sgd_options(), Device::cpu(), whole),
                         doctest::Contains("15 layers"), Error);
    whole.split_blocks = true;
    CHECK_NOTHROW(PipelineEngine(small_resnet(), sgd_options(), Device::cpu(), whole));
  }

  TEST_CASE("stale trains with a cut at a block's start and inside it") {
    // Cut 11 starts block 2, cut 12 puts its conv1 in partition 0. Repeating one batch, the loss
    // must fall with either (the threaded-vs-processes identity is tests/mpi's).
    const std::vector<data::Batch> one = batches(1, 6);
    for (const char* ppv : {"11", "12"}) {
      CAPTURE(ppv);
      PipelineOptions options;
      options.ppv = ppv;
      options.split_blocks = true;
      options.schedule = ScheduleKind::Stale;
      std::vector<double> losses;
      options.on_result = [&](const BatchResult& r) { losses.push_back(r.loss); };
      PipelineEngine engine(small_resnet(), sgd_options(), Device::cpu(), options);
      for (int i = 0; i < 12; ++i) engine.train_step(one[0]);
      engine.finish_epoch();
      REQUIRE(losses.size() == 12);
      CHECK(losses.back() < losses.front());
    }
  }

  TEST_CASE("balance: a block's pieces are scaled to the block's own time") {
    auto model = small_resnet();
    std::vector<LayerProfile> whole(15);
    for (size_t j = 0; j < 15; ++j) whole[j].forward_s = static_cast<double>(j + 1);
    std::vector<double> cost(42, 1.0);
    cost[3] = 2;  // block 0's pieces: 2, 1, 1, 1 -> 4 : 2 : 2 : 2 of its 4 s
    scale_pieces_to_blocks(*model, whole, cost);
    CHECK(cost[0] == 1);
    CHECK(cost[2] == 1);  // the stem keeps its own profile: only blocks are scaled
    CHECK(cost[3] == doctest::Approx(4 * 2.0 / 5));
    CHECK(cost[4] == doctest::Approx(4 * 1.0 / 5));
    CHECK(cost[7] + cost[8] + cost[9] + cost[10] == doctest::Approx(5));  // block 1: 5 s
    CHECK(cost[41] == 1);
    std::vector<double> short_cost(41, 1.0);
    CHECK_THROWS_WITH_AS(scale_pieces_to_blocks(*model, whole, short_cost),
                         doctest::Contains("41 pieces"), Error);
  }

  TEST_CASE("balance auto with split blocks trains") {
    PipelineOptions options;
    options.balance_auto = true;
    options.split_blocks = true;
    PipelineEngine engine(small_resnet(), sgd_options(), Device::cpu(), options);
    for (const data::Batch& batch : batches(3, 6)) engine.train_step(batch);
    engine.finish_epoch();
    const json::Value report = engine.report();
    const std::vector<int64_t> cuts = parse_ppv(report.at("ppv").as_string());
    REQUIRE(cuts.size() == 1);
    CHECK(cuts[0] > 0);
    CHECK(cuts[0] < 42);
  }
}
