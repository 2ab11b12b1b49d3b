// report.html: a self-contained page (no scripts, no external files) with the run's loss and
// accuracy curves as inline SVG, the configuration and the summary. Any browser opens it offline.
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
                           int width = 560, int height = 320);

struct ReportData {
  std::string title;
  json::Value config;   // object: shown as a key/value table
  json::Value summary;  // object: shown as a key/value table (nested values as compact JSON)
  std::vector<EpochRecord> epochs;
  std::vector<StepPoint> steps;  // sampled training loss
};

std::string render_report_html(const ReportData& data);

// Escapes &, <, >, " and ' for HTML text and attributes.
std::string html_escape(const std::string& text);

}  // namespace echelon::app
