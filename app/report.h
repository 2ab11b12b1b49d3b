// report.html: a self-contained page (no scripts, no external files): loss, accuracy and
// time-per-epoch curves, the data loader's stages and the pipeline's partitions as bar charts
// (inline SVG), and the summary and configuration as tables. Any browser opens it offline.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <echelon/app/metrics.h>
#include <echelon/base/json.h>

namespace echelon::app {

struct ChartSeries {
  std::string name;
  std::string color;                              // CSS colour, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite points are skipped
};

// A line chart with axes, "nice" ticks, a legend and labelled axes, as an <svg> element.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<ChartSeries>& series,
                           int width = 680, int height = 320);

// One bar of svg_bar_chart: a label and its stacked parts (same order as the part names).
struct BarRow {
  std::string label;
  std::vector<double> parts;
};
// Horizontal stacked bars, one row per BarRow, e.g. a data stage's busy and stalled seconds.
std::string svg_bar_chart(const std::string& title, const std::string& x_label,
                          const std::vector<ChartSeries>& parts, const std::vector<BarRow>& rows,
                          int width = 680);

struct ReportData {
  std::string title;
  json::Value config;   // object: shown as a key/value table
  json::Value summary;  // object: a key/value table; nested objects as nested tables, arrays of
                        // objects (data stages, partitions) as tables with a column per key
  std::vector<EpochRecord> epochs;
  std::vector<StepPoint> steps;  // sampled training loss
};

std::string render_report_html(const ReportData& data);

// Escapes &, <, >, " and ' for HTML text and attributes.
std::string html_escape(const std::string& text);

}  // namespace echelon::app
