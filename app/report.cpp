#include <echelon/app/report.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace echelon::app {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

std::string number(double v, int precision = 4) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
  return buf;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving about `target` intervals.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1.0;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double residual = raw / magnitude;
  const double nice = residual < 1.5 ? 1 : residual < 3.5 ? 2 : residual < 7.5 ? 5 : 10;
  return nice * magnitude;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // Widens a degenerate range and snaps the ends to the tick grid.
  double snap(int target) {
    if (empty()) lo = 0, hi = 1;
    if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
    const double step = nice_step(hi - lo, target);
    lo = std::floor(lo / step) * step;
    hi = std::ceil(hi / step) * step;
    return step;
  }
};

// A legend entry, wrapped onto a second line (tspan) when longer than `width` pixels allow.
std::string legend_text(const std::string& name, double x, double y, double width) {
  const size_t per_line = static_cast<size_t>(std::max(8.0, width / 6.2));  // ~6 px per glyph
  std::string first = name, second;
  if (name.size() > per_line) {
    const size_t cut = name.rfind(' ', per_line);
    const size_t at = cut == std::string::npos || cut == 0 ? per_line : cut;
    first = name.substr(0, at);
    second = name.substr(name[at] == ' ' ? at + 1 : at);
  }
  std::string svg = "<text x=\"" + number(x) + "\" y=\"" + number(y) + "\">" + html_escape(first);
  if (!second.empty())
    svg += "<tspan x=\"" + number(x) + "\" dy=\"12\">" + html_escape(second) + "</tspan>";
  return svg + "</text>\n";
}

}  // namespace

// One SVG document written top to bottom (frame, grid, axes, series, legend); it stays one
// function because every part shares the same coordinate mapping px/py.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<ChartSeries>& series,
                           int width, int height) {
  // The legend has its own column right of the plot, so it never covers a curve.
  const double legend_w = 150;
  const double left = 64, right = 16 + legend_w, top = 36, bottom = 48;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  Range xr, yr;
  for (const ChartSeries& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) xr.add(x), yr.add(y);
  const double x_step = xr.snap(6), y_step = yr.snap(5);
  auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * plot_w; };
  auto py = [&](double y) { return top + (1.0 - (y - yr.lo) / (yr.hi - yr.lo)) * plot_h; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                    std::to_string(width) + " " + std::to_string(height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<text x=\"" + number(width / 2.0) +
         "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" + html_escape(title) + "</text>\n";
  // Grid and tick labels. Half a step of slack absorbs floating-point drift in the loop.
  for (double y = yr.lo; y <= yr.hi + y_step / 2; y += y_step) {
    svg += "<line x1=\"" + number(left) + "\" x2=\"" + number(left + plot_w) + "\" y1=\"" +
           number(py(y)) + "\" y2=\"" + number(py(y)) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + number(left - 6) + "\" y=\"" + number(py(y) + 4) +
           "\" text-anchor=\"end\">" + number(y) + "</text>\n";
  }
  for (double x = xr.lo; x <= xr.hi + x_step / 2; x += x_step) {
    svg += "<line y1=\"" + number(top) + "\" y2=\"" + number(top + plot_h) + "\" x1=\"" +
           number(px(x)) + "\" x2=\"" + number(px(x)) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + number(px(x)) + "\" y=\"" + number(top + plot_h + 16) +
           "\" text-anchor=\"middle\">" + number(x) + "</text>\n";
  }
  svg += "<rect x=\"" + number(left) + "\" y=\"" + number(top) + "\" width=\"" + number(plot_w) +
         "\" height=\"" + number(plot_h) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  svg += "<text x=\"" + number(left + plot_w / 2) + "\" y=\"" + number(height - 8.0) +
         "\" text-anchor=\"middle\">" + html_escape(x_label) + "</text>\n";
  svg += "<text transform=\"translate(14," + number(top + plot_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + html_escape(y_label) + "</text>\n";

  for (size_t i = 0; i < series.size(); ++i) {
    const ChartSeries& s = series[i];
    std::string points;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y))
        points.append(number(px(x), 6)).append(",").append(number(py(y), 6)).append(" ");
    const std::string color = html_escape(s.color);
    svg.append("<polyline fill=\"none\" stroke=\"")
        .append(color)
        .append("\" stroke-width=\"1.8\" points=\"")
        .append(points)
        .append("\"/>\n");
    if (s.points.size() <= 60) {  // markers only where they stay readable
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += "<circle cx=\"" + number(px(x), 6) + "\" cy=\"" + number(py(y), 6) +
                 "\" r=\"2.5\" fill=\"" + color + "\"/>\n";
    }
    const double ly = top + 10 + 28.0 * static_cast<double>(i);
    const double lx = left + plot_w + 12;
    svg += "<line x1=\"" + number(lx) + "\" x2=\"" + number(lx + 20) + "\" y1=\"" + number(ly - 4) +
           "\" y2=\"" + number(ly - 4) + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    svg += legend_text(s.name, lx + 25, ly, legend_w - 30);
  }
  svg += "</svg>\n";
  return svg;
}

// Rows stacked top to bottom; parts left to right on one seconds axis shared by all rows.
std::string svg_bar_chart(const std::string& title, const std::string& x_label,
                          const std::vector<ChartSeries>& parts, const std::vector<BarRow>& rows,
                          int width) {
  const double left = 110, right = 166, top = 36, bottom = 48, row_h = 22;
  const double plot_w = width - left - right;
  const double plot_h = row_h * static_cast<double>(std::max<size_t>(rows.size(), 1));
  const double height = top + plot_h + bottom;
  Range xr;
  xr.add(0);
  for (const BarRow& row : rows) {
    double total = 0;
    for (const double v : row.parts) total += std::isfinite(v) ? std::max(v, 0.0) : 0.0;
    xr.add(total);
  }
  const double x_step = xr.snap(5);
  auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * plot_w; };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + number(height) + "\" font-family=\"sans-serif\" " +
                    "font-size=\"11\">\n<text x=\"" + number(width / 2.0) +
                    "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" + html_escape(title) +
                    "</text>\n";
  for (double x = xr.lo; x <= xr.hi + x_step / 2; x += x_step)
    svg += "<line y1=\"" + number(top) + "\" y2=\"" + number(top + plot_h) + "\" x1=\"" +
           number(px(x)) + "\" x2=\"" + number(px(x)) + "\" stroke=\"#e5e5e5\"/>\n<text x=\"" +
           number(px(x)) + "\" y=\"" + number(top + plot_h + 16) + "\" text-anchor=\"middle\">" +
           number(x) + "</text>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = top + row_h * static_cast<double>(r);
    svg += "<text x=\"" + number(left - 6) + "\" y=\"" + number(y + 15) +
           "\" text-anchor=\"end\">" + html_escape(rows[r].label) + "</text>\n";
    double at = 0;
    for (size_t p = 0; p < rows[r].parts.size() && p < parts.size(); ++p) {
      const double v = std::isfinite(rows[r].parts[p]) ? std::max(rows[r].parts[p], 0.0) : 0.0;
      svg += "<rect x=\"" + number(px(at), 6) + "\" y=\"" + number(y + 4) + "\" width=\"" +
             number(px(at + v) - px(at), 6) + "\" height=\"" + number(row_h - 8) + "\" fill=\"" +
             html_escape(parts[p].color) + "\"><title>" + html_escape(parts[p].name) + ": " +
             number(v) + "</title></rect>\n";
      at += v;
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const double lx = left + plot_w + 12, ly = top + 10 + 18.0 * static_cast<double>(p);
    svg += "<rect x=\"" + number(lx) + "\" y=\"" + number(ly - 9) + "\" width=\"14\" " +
           "height=\"10\" fill=\"" + html_escape(parts[p].color) + "\"/>\n" +
           legend_text(parts[p].name, lx + 20, ly, right - 36);
  }
  svg += "<text x=\"" + number(left + plot_w / 2) + "\" y=\"" + number(height - 8.0) +
         "\" text-anchor=\"middle\">" + html_escape(x_label) + "</text>\n</svg>\n";
  return svg;
}

namespace {

std::string value_html(const json::Value& value);

std::string key_value_table(const json::Value& object) {
  if (!object.is_object()) return "";
  std::string html = "<table>\n";
  for (const auto& [key, value] : object.as_object())
    html += "<tr><th>" + html_escape(key) + "</th><td>" + value_html(value) + "</td></tr>\n";
  return html + "</table>\n";
}

// An array of objects (the data stages, the partitions): one row each, a column per key.
std::string records_table(const json::Array& records) {
  std::vector<std::string> columns;
  for (const json::Value& record : records)
    for (const auto& [key, unused] : record.as_object())
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
  std::string html = "<table>\n<tr>";
  for (const std::string& column : columns) html += "<th>" + html_escape(column) + "</th>";
  html += "</tr>\n";
  for (const json::Value& record : records) {
    html += "<tr>";
    for (const std::string& column : columns) {
      const json::Value* cell = record.find(column);
      html += "<td>" + (cell ? value_html(*cell) : std::string()) + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

std::string value_html(const json::Value& value) {
  if (value.is_object()) return key_value_table(value);
  if (value.kind() == json::Kind::Double) return number(value.as_double(), 5);
  if (value.is_string()) return html_escape(value.as_string());
  if (!value.is_array()) return html_escape(value.dump());
  const json::Array& items = value.as_array();
  const bool all_objects =
      !items.empty() &&
      std::all_of(items.begin(), items.end(), [](const auto& v) { return v.is_object(); });
  if (all_objects) return records_table(items);
  std::string text;
  for (const json::Value& item : items)
    text += (text.empty() ? "" : ", ") +
            (item.kind() == json::Kind::Double ? number(item.as_double(), 5) : item.dump());
  return html_escape(text);
}

// Bars of seconds, one per record of `records` (an array of objects), labelled by `label_key`.
std::string seconds_bars(const std::string& title, const json::Value* records,
                         const std::string& label_key, const std::vector<ChartSeries>& parts) {
  if (!records || !records->is_array() || records->as_array().empty()) return "";
  std::vector<BarRow> rows;
  for (const json::Value& record : records->as_array()) {
    const json::Value* label = record.find(label_key);
    BarRow row{
        label ? (label->is_string() ? label->as_string() : label_key + " " + label->dump()) : "?",
        {}};
    for (const ChartSeries& part : parts) {
      const json::Value* v = record.find(part.name);
      row.parts.push_back(v && v->is_number() ? v->as_double() : 0.0);
    }
    rows.push_back(std::move(row));
  }
  return svg_bar_chart(title, "seconds", parts, rows);
}

}  // namespace

std::string render_report_html(const ReportData& data) {
  ChartSeries step_loss{"train (mean per log interval)", "#9ecae1", {}};
  for (const StepPoint& p : data.steps) step_loss.points.emplace_back(p.epoch, p.loss);
  ChartSeries train_loss{"train (epoch mean)", "#1f77b4", {}}, test_loss{"test", "#d62728", {}};
  ChartSeries train_acc{"train", "#1f77b4", {}}, test_acc{"test", "#d62728", {}};
  ChartSeries train_s{"training", "#1f77b4", {}}, eval_s{"evaluation", "#ff7f0e", {}};
  for (const EpochRecord& e : data.epochs) {
    const double x = static_cast<double>(e.epoch + 1);
    train_loss.points.emplace_back(x, e.train_loss);
    test_loss.points.emplace_back(x, e.test_loss);
    train_acc.points.emplace_back(x, 100.0 * e.train_acc);
    test_acc.points.emplace_back(x, 100.0 * e.test_acc);
    train_s.points.emplace_back(x, e.train_s);
    eval_s.points.emplace_back(x, e.eval_s);
  }

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                     html_escape(data.title) +
                     "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
                     "table{border-collapse:collapse;margin:8px 0 20px}th,td{border:1px solid #ddd;"
                     "padding:3px 8px;text-align:left;font-size:13px;vertical-align:top}"
                     "th{background:#f4f4f4}td table{margin:0}"
                     ".charts{display:flex;flex-wrap:wrap;gap:16px}</style></head><body>\n<h1>" +
                     html_escape(data.title) + "</h1>\n<div class=\"charts\">\n";
  html += svg_line_chart("Loss", "epoch", "cross-entropy", {step_loss, train_loss, test_loss});
  html += svg_line_chart("Accuracy", "epoch", "accuracy (%)", {train_acc, test_acc});
  html += svg_line_chart("Time per epoch", "epoch", "seconds", {train_s, eval_s});
  const json::Value* echo = data.summary.is_object() ? data.summary.find("echo") : nullptr;
  const json::Value* pipeline = data.summary.is_object() ? data.summary.find("pipeline") : nullptr;
  html += seconds_bars("Data loader stages", echo ? echo->find("stages") : nullptr, "name",
                       {{"busy_s", "#1f77b4", {}}, {"stall_s", "#ff7f0e", {}}});
  html += seconds_bars(
      "Pipeline partitions", pipeline ? pipeline->find("stages") : nullptr, "partition",
      {{"busy_s", "#1f77b4", {}}, {"wait_s", "#ff7f0e", {}}, {"send_s", "#2ca02c", {}}});
  html +=
      "</div>\n<h2>Epochs</h2>\n<table>\n<tr><th>epoch</th><th>lr</th><th>train loss</th>"
      "<th>train acc</th><th>test loss</th><th>test acc</th><th>images/s</th>"
      "<th>train s</th></tr>\n";
  for (const EpochRecord& e : data.epochs) {
    html += "<tr><td>" + std::to_string(e.epoch + 1) + "</td><td>" + number(e.lr) + "</td><td>" +
            number(e.train_loss) + "</td><td>" + number(100 * e.train_acc) + "%</td><td>" +
            number(e.test_loss) + "</td><td>" + number(100 * e.test_acc) + "%</td><td>" +
            number(e.images_per_s, 5) + "</td><td>" + number(e.train_s, 4) + "</td></tr>\n";
  }
  html += "</table>\n<h2>Summary</h2>\n" + key_value_table(data.summary);
  html += "<h2>Configuration</h2>\n" + key_value_table(data.config);
  html += "</body></html>\n";
  return html;
}

}  // namespace echelon::app
