// `echelon bench op|model|pipeline|loader`: runs the parallel layer's microbenchmarks
// (parallel/op_bench.h, model_bench.h, loader_bench.h) with the run's common settings, prints a
// readable table and, when asked, writes the result as one JSON object.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/parallel/loader_bench.h>
#include <echelon/parallel/model_bench.h>
#include <echelon/parallel/op_bench.h>

namespace echelon::app {

// Settings every bench subcommand shares (the same names as `echelon train`'s).
struct BenchCommon {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int threads = 0;              // CPU threads of the ops' pool (0: its default size)
  std::string json_path;        // write the result here as JSON (empty: no file)
  std::string html_path;        // write a report page here: the table and bar charts
  bool autotune = false;        // ops::set_conv_autotune: tune our CUDA convs in the warm-up
};

// What `bench loader` needs beyond the loader options.
struct LoaderBenchSpec {
  std::string data = "fashion-mnist";
  std::string data_dir;
  int64_t limit = 0;   // use only the first N training examples (0: all)
  std::string model;   // a training step of this model consumes each batch (empty: none)
  double step_ms = 0;  // or the consumer sleeps this long per batch
  std::string echo = "1";
  std::string echo_at = "after-augment";
  parallel::LoaderBenchOptions options;
};

// Each runs its benchmark on `common.device`, prints the table to `out`, writes --json and --html
// and returns the JSON. Bad values throw echelon::Error naming the flag.
json::Value bench_op(const BenchCommon& common, parallel::OpBenchOptions options,
                     std::ostream& out);
json::Value bench_model(const BenchCommon& common, parallel::ModelBenchOptions options,
                        std::ostream& out);
json::Value bench_pipeline(const BenchCommon& common, parallel::PipelineBenchOptions options,
                           std::ostream& out);
json::Value bench_loader(const BenchCommon& common, LoaderBenchSpec spec, std::ostream& out);

// The tables (bench_tables.cpp).
void print_op_table(const parallel::OpBenchResult& r, std::ostream& out);
void print_model_table(const parallel::ModelBenchResult& r, std::ostream& out);
void print_pipeline_table(const parallel::PipelineBenchResult& r, std::ostream& out);
void print_loader_table(const parallel::LoaderBenchResult& r, std::ostream& out);

// The report page (bench_report.cpp): one horizontal bar chart per table, as inline SVG.
struct BenchBar {
  std::string label;
  double value = 0;
};
struct BenchChart {
  std::string title, unit;
  std::vector<BenchBar> bars;
};
std::string svg_bar_chart(const BenchChart& chart);
std::string render_bench_html(const std::string& title, const std::string& table,
                              const std::vector<BenchChart>& charts);
std::vector<BenchChart> op_charts(const parallel::OpBenchResult& r);
std::vector<BenchChart> model_charts(const parallel::ModelBenchResult& r);
std::vector<BenchChart> pipeline_charts(const parallel::PipelineBenchResult& r);
std::vector<BenchChart> loader_charts(const parallel::LoaderBenchResult& r);

}  // namespace echelon::app
