// The microbenchmark machinery of the parallel layer (timing.h, op_bench.h, model_bench.h,
// loader_bench.h): statistics, result fields and their consistency, errors. Timings are never
// asserted, only their internal order (min <= q1 <= median <= q3 <= max).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <echelon/echelon.h>
#include <echelon/parallel/loader_bench.h>
#include <echelon/parallel/model_bench.h>
#include <echelon/parallel/op_bench.h>
#include <echelon/parallel/timing.h>
#include <echelon/tensor/cpu/matmul.h>

using namespace echelon;

namespace {

void check_ordered(const parallel::TimingStats& t, int repeats) {
  CHECK(t.repeats == repeats);
  CHECK(t.min_s <= t.q1_s);
  CHECK(t.q1_s <= t.median_s);
  CHECK(t.median_s <= t.q3_s);
  CHECK(t.q3_s <= t.max_s);
  CHECK(t.min_s >= 0);
}

// A tiny input for every op family, so the whole table runs in well under a second.
Shape tiny_input(const std::string& family, const std::string& op) {
  if (family == "matmul" || op == "transpose") return {5, 7};
  if (op == "softmax" || op == "log_softmax" || op == "cross_entropy") return {4, 6};
  if (family == "conv" || family == "pool" || family == "norm" || family == "im2col")
    return {2, 3, 6, 6};
  return {17};
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace

TEST_SUITE("bench") {
  TEST_CASE("summarize: median, quartiles, extremes and mean") {
    const parallel::TimingStats s = parallel::summarize({4, 1, 3, 2});
    CHECK(s.repeats == 4);
    CHECK(s.median_s == doctest::Approx(2.5));
    CHECK(s.q1_s == doctest::Approx(1.75));
    CHECK(s.q3_s == doctest::Approx(3.25));
    CHECK(s.iqr_s() == doctest::Approx(1.5));
    CHECK(s.min_s == 1);
    CHECK(s.max_s == 4);
    CHECK(s.mean_s == doctest::Approx(2.5));
    CHECK(parallel::summarize({}).repeats == 0);
    const json::Value j = s.to_json();
    CHECK(j.at("median_ms").as_double() == doctest::Approx(2500));
    CHECK(j.at("iqr_ms").as_double() == doctest::Approx(1500));
  }

  TEST_CASE("time_repeated runs warm-up rounds untimed, then the timed rounds") {
    int calls = 0;
    const parallel::TimingStats t = parallel::time_repeated([&] { ++calls; }, Device::cpu(), 2, 3);
    CHECK(calls == 5);
    check_ordered(t, 3);
    CHECK_THROWS_WITH_AS(parallel::time_repeated([] {}, Device::cpu(), 0, 0),
                         doctest::Contains("repeats must be >= 1"), Error);
  }

  TEST_CASE("every op of the table runs and reports consistent passes") {
    for (const parallel::BenchOpInfo& info : parallel::bench_ops()) {
      CAPTURE(info.name);
      parallel::OpBenchOptions o;
      o.op = info.name;
      o.input = tiny_input(info.family, info.name);
      o.warmup = 1;
      o.repeats = 2;
      const parallel::OpBenchResult r = parallel::run_op_bench(o);
      REQUIRE(!r.impls.empty());
      CHECK(r.impls.front().impl == "naive");
      CHECK(r.impls.size() == parallel::op_impls(info.name, Device::cpu()).size());
      for (const parallel::OpImplResult& impl : r.impls) {
        REQUIRE(impl.passes.size() == r.impls.front().passes.size());
        for (const parallel::OpPassResult& p : impl.passes) {
          check_ordered(p.time, 2);
          CHECK((p.flops > 0 || p.bytes > 0));
        }
      }
      for (const parallel::OpPassResult& p : r.impls.front().passes) CHECK(p.speedup == 1.0);
      const json::Value j = r.to_json();
      CHECK(j.at("op").as_string() == info.name);
      CHECK(j.at("impls").size() == r.impls.size());
    }
  }

  TEST_CASE("conv2d and matmul: forward, backward-data and backward-weight in FLOP/s") {
    parallel::OpBenchOptions o;
    o.op = "conv2d";
    o.input = {2, 3, 7, 7};
    o.out_channels = 4;
    o.repeats = 1;
    const parallel::OpBenchResult r = parallel::run_op_bench(o);
    REQUIRE(r.impls.front().passes.size() == 3);
    CHECK(r.impls.front().passes[0].pass == "forward");
    CHECK(r.impls.front().passes[1].pass == "backward-data");
    CHECK(r.impls.front().passes[2].pass == "backward-weight");
    // 2 * N * O * OH * OW * C * KH * KW with 3x3, pad 1: the output is 7x7.
    CHECK(r.impls.front().passes[0].flops == doctest::Approx(2.0 * 2 * 4 * 49 * 3 * 9));
    CHECK(contains(r.shapes, "[2, 4, 7, 7]"));
    if (cpu::blas_available()) CHECK(r.impls.back().impl == "fast");
  }

  TEST_CASE("unknown ops, bad shapes and unavailable implementations throw, naming them") {
    parallel::OpBenchOptions o;
    o.op = "frobnicate";
    CHECK_THROWS_WITH_AS(parallel::run_op_bench(o), doctest::Contains("unknown op 'frobnicate'"),
                         Error);
    o.op = "conv2d";
    o.input = {1, 2};
    CHECK_THROWS_WITH_AS(parallel::run_op_bench(o), doctest::Contains("input must be N,C,H,W"),
                         Error);
    o.input = {1, 2, 0, 3};
    CHECK_THROWS_WITH_AS(parallel::run_op_bench(o), doctest::Contains(">= 1"), Error);
    o.input = {1, 2, 5, 5};
    o.impls = {"cudnn"};
    CHECK_THROWS_WITH_AS(parallel::run_op_bench(o), doctest::Contains("not available"), Error);
  }

  TEST_CASE("the implementation settings are restored after a benchmark") {
    ops::set_matmul_impl(ops::MatmulImpl::Auto);
    parallel::OpBenchOptions o;
    o.op = "matmul";
    o.input = {3, 4};
    o.repeats = 1;
    parallel::run_op_bench(o);
    CHECK(ops::matmul_impl() == ops::MatmulImpl::Auto);
  }

  TEST_CASE("conv2d on CPU: the naive twin and im2col + BLAS agree; need_weight = false") {
    Generator gen(3);
    const Tensor x = ops::randn({2, 3, 6, 5}, gen), w = ops::randn({4, 3, 3, 3}, gen);
    const Tensor gy = ops::randn({2, 4, 6, 5}, gen);
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 3;
    g.pad_h = g.pad_w = 1;
    ops::set_matmul_impl(ops::MatmulImpl::Naive);
    const Tensor naive = ops::conv2d(x, w, Tensor(), g);
    const ops::Conv2dGrads naive_grads = ops::conv2d_backward(gy, x, w, false, true, g, false);
    ops::set_matmul_impl(ops::MatmulImpl::Auto);
    const Tensor fast = ops::conv2d(x, w, Tensor(), g);
    const ops::Conv2dGrads fast_grads = ops::conv2d_backward(gy, x, w, false, true, g);
    CHECK_FALSE(naive_grads.weight.defined());
    CHECK(fast_grads.weight.defined());
    const float* a = naive.data<float>();
    const float* b = fast.data<float>();
    for (int64_t i = 0; i < naive.numel(); ++i) CHECK(std::abs(a[i] - b[i]) <= 1e-4f);
    const float* ga = naive_grads.input.data<float>();
    const float* gb = fast_grads.input.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) CHECK(std::abs(ga[i] - gb[i]) <= 1e-4f);
  }

  TEST_CASE("model benchmark: every layer, shares summing to one, the whole step") {
    parallel::ModelBenchOptions o;
    o.input.model = "lenet5";
    o.input.batch_size = 4;
    o.per_layer = true;
    o.warmup = 0;
    o.repeats = 2;
    const parallel::ModelBenchResult r = parallel::run_model_bench(o);
    const auto model = o.input.make_model();
    REQUIRE(r.layers.size() == model->size());
    double share = 0;
    for (const parallel::LayerBench& l : r.layers) {
      check_ordered(l.profile.forward_time, 2);
      CHECK(l.profile.activation_bytes > 0);
      share += l.share;
    }
    CHECK(share == doctest::Approx(1.0));
    check_ordered(r.step, 2);
    CHECK(r.images_per_s > 0);
    CHECK(r.to_json().at("layers").size() == r.layers.size());
    for (const parallel::LayerBench& l : r.layers) CHECK(l.cost_s == l.profile.cost());
    CHECK(r.layers_total_s == doctest::Approx(r.pieces_total_s));
  }

  TEST_CASE("model benchmark, --split-blocks: the pieces weighed as --balance auto weighs them") {
    parallel::ModelBenchOptions o;
    o.input.model = "resnet20";
    o.input.batch_size = 2;
    o.per_layer = o.split_blocks = true;
    o.warmup = 0;
    o.repeats = 1;
    const parallel::ModelBenchResult r = parallel::run_model_bench(o);
    const auto view = o.input.make_model()->with_split_blocks();
    REQUIRE(r.layers.size() == view->size());
    double share = 0, total = 0, pieces = 0;
    int scaled = 0;
    for (const parallel::LayerBench& l : r.layers) {
      share += l.share;
      total += l.cost_s;
      pieces += l.profile.cost();
      const bool piece = l.layer.rfind("BasicBlock", 0) == 0;
      // A block's pieces are scaled to the block's own time (never exactly their own sum); a
      // layer outside the blocks keeps its time.
      if (piece)
        scaled += l.cost_s != l.profile.cost();
      else
        CHECK(l.cost_s == l.profile.cost());
    }
    CHECK(scaled > 0);
    CHECK(share == doctest::Approx(1.0));
    CHECK(r.layers_total_s == doctest::Approx(total));
    CHECK(r.pieces_total_s == doctest::Approx(pieces));
    const json::Value json = r.to_json();
    CHECK(json.at("split_blocks").as_bool());
    CHECK(json.at("layers").as_array().at(3).at("cost_ms").as_double() ==
          doctest::Approx(r.layers[3].cost_s * 1e3));
  }

  TEST_CASE("pipeline benchmark: each partition's window and the one-worker baseline") {
    parallel::PipelineBenchOptions o;
    o.input.model = "lenet5";
    o.input.batch_size = 8;
    o.pipeline.partitions = 2;
    o.pipeline.schedule = parallel::ScheduleKind::Stale;
    o.warmup = 1;
    o.steps = 3;
    const parallel::PipelineBenchResult r = parallel::run_pipeline_bench(o);
    REQUIRE(r.partitions.size() == 2);
    CHECK(r.cuts.size() == 1);
    for (const parallel::PartitionBench& p : r.partitions) {
      CHECK(p.stats.forwards == 3);
      CHECK(p.stats.backwards == 3);
      CHECK(p.stats.busy_s > 0);
      CHECK(p.stats.busy_s <= r.wall_s * 1.01);
      CHECK(p.idle_s >= 0);
    }
    CHECK(r.images_per_s > 0);
    CHECK(r.single_images_per_s > 0);
    CHECK(r.to_json().at("partitions").size() == 2);
  }

  TEST_CASE("loader benchmark: stage rates, ring samples and the auto echo factor") {
    const data::DatasetSplits data = data::load_dataset("synthetic", "", {.train = 64, .test = 16});
    parallel::LoaderBenchOptions o;
    o.loader.batch_size = 16;
    o.loader.workers = 1;
    o.loader.echo_factor = 2;
    const parallel::LoaderBenchResult r = parallel::run_loader_bench(data.train, o);
    CHECK(r.batches == 8);
    CHECK(r.items == 128);
    CHECK(r.stats.fresh == 64);
    CHECK(r.rings.size() == r.stats.stages.size());
    CHECK(r.auto_echo >= 1.0);
    CHECK(r.auto_echo <= 8.0);
    const json::Value j = r.to_json();
    CHECK(j.at("loader").at("stages").size() == r.stats.stages.size());
    o.max_batches = 3;
    CHECK(parallel::run_loader_bench(data.train, o).batches == 3);
  }
}
