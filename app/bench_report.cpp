// The bench report page (--html FILE): the run's table as text and one horizontal bar chart per
// table, as inline SVG; no scripts, no external files.
#include <algorithm>
#include <cstdio>

#include <echelon/app/bench.h>
#include <echelon/app/report.h>

namespace echelon::app {

namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

std::string bar_row(const BenchBar& bar, double max_value, int y) {
  constexpr int kLabel = 300, kWidth = 380;
  const double width = max_value > 0 ? kWidth * std::max(bar.value, 0.0) / max_value : 0;
  return "<text x=\"" + std::to_string(kLabel - 6) + "\" y=\"" + std::to_string(y + 12) +
         "\" text-anchor=\"end\">" + html_escape(bar.label) + "</text>\n<rect x=\"" +
         std::to_string(kLabel) + "\" y=\"" + std::to_string(y) + "\" width=\"" + number(width) +
         "\" height=\"14\" fill=\"#1f77b4\"/>\n<text x=\"" + number(kLabel + width + 4) +
         "\" y=\"" + std::to_string(y + 12) + "\">" + number(bar.value) + "</text>\n";
}

}  // namespace

std::string svg_bar_chart(const BenchChart& chart) {
  double max_value = 0;
  for (const BenchBar& bar : chart.bars) max_value = std::max(max_value, bar.value);
  const int height = 30 + 18 * static_cast<int>(chart.bars.size());
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"" +
                    std::to_string(height) + "\" font-size=\"11\">\n<text x=\"4\" y=\"16\" " +
                    "font-size=\"13\">" + html_escape(chart.title + " (" + chart.unit + ")") +
                    "</text>\n";
  int y = 26;
  for (const BenchBar& bar : chart.bars) {
    svg += bar_row(bar, max_value, y);
    y += 18;
  }
  return svg + "</svg>\n";
}

std::string render_bench_html(const std::string& title, const std::string& table,
                              const std::vector<BenchChart>& charts) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                     html_escape(title) +
                     "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
                     "pre{background:#f6f6f6;padding:8px}</style></head><body>\n<h1>" +
                     html_escape(title) + "</h1>\n<pre>" + html_escape(table) + "</pre>\n";
  for (const BenchChart& chart : charts) html += svg_bar_chart(chart);
  return html + "</body></html>\n";
}

std::vector<BenchChart> op_charts(const parallel::OpBenchResult& r) {
  BenchChart chart{"median time per implementation and pass", "ms", {}};
  for (const parallel::OpImplResult& impl : r.impls)
    for (const parallel::OpPassResult& p : impl.passes)
      chart.bars.push_back({impl.impl + " " + p.pass, p.time.median_s * 1e3});
  return {chart};
}

std::vector<BenchChart> model_charts(const parallel::ModelBenchResult& r) {
  BenchChart layers{"forward + backward per layer", "ms", {}};
  for (const parallel::LayerBench& l : r.layers)
    layers.bars.push_back({std::to_string(l.index) + " " + l.layer.substr(0, 40), l.cost_s * 1e3});
  BenchChart step{"training step", "ms", {{"median", r.step.median_s * 1e3}}};
  if (layers.bars.empty()) return {step};
  step.bars.push_back({"layers summed", r.layers_total_s * 1e3});
  return {layers, step};
}

std::vector<BenchChart> pipeline_charts(const parallel::PipelineBenchResult& r) {
  BenchChart time{"time per partition", "s", {}};
  for (const parallel::PartitionBench& p : r.partitions) {
    const std::string k = "partition " + std::to_string(p.stats.partition);
    time.bars.push_back({k + " busy", p.stats.busy_s});
    time.bars.push_back({k + " idle", p.idle_s});
    time.bars.push_back({k + " bubble", p.stats.wait_s});
    time.bars.push_back({k + " transfer", p.stats.send_s});
  }
  BenchChart rate{"throughput",
                  "images/s",
                  {{r.engine, r.images_per_s}, {"one worker", r.single_images_per_s}}};
  return {time, rate};
}

std::vector<BenchChart> loader_charts(const parallel::LoaderBenchResult& r) {
  BenchChart rate{"items per second of each stage", "items/s", {}};
  for (const data::LoaderStageStats& s : r.stats.stages) rate.bars.push_back({s.name, s.rate});
  rate.bars.push_back({"to the consumer", r.items_per_s});
  return {rate};
}

}  // namespace echelon::app
