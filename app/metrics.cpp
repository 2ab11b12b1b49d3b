#include <echelon/app/metrics.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <echelon/base/error.h>

namespace echelon::app {

std::string format_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * fraction);
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[32];
  if (h > 0)
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  else
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(s));
  return buf;
}

bool is_terminal(int fd) {
  return ::isatty(fd) == 1;
}

int terminal_columns() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int parsed = std::atoi(columns);
    if (parsed > 0) return parsed;
  }
  return 80;
}

ProgressDisplay::ProgressDisplay(std::ostream& out, bool tty, int64_t log_every, int columns)
    : out_(out), tty_(tty), log_every_(log_every), columns_(columns) {}

std::string ProgressDisplay::fit_line(const ProgressState& state, int columns) {
  const int room = std::max(columns - 1, 1);
  const int without_bar = static_cast<int>(render(state, false).size());
  const int bar_width = std::min(30, room - without_bar - 3);  // "[" + bar + "] "
  std::string line = bar_width >= 5 ? render(state, true, bar_width) : render(state, false);
  if (static_cast<int>(line.size()) > room) line.resize(static_cast<size_t>(room));
  return line;
}

std::string ProgressDisplay::render(const ProgressState& s, bool with_bar, int bar_width) {
  std::string line = str("epoch ", s.epoch + 1, "/", s.epochs, " ");
  if (with_bar && s.steps > 0) {
    const double frac = std::min(1.0, static_cast<double>(s.step) / static_cast<double>(s.steps));
    const int filled = static_cast<int>(frac * bar_width);
    line += '[';
    line.append(static_cast<size_t>(filled), '#');
    line.append(static_cast<size_t>(bar_width - filled), '.');
    line += "] ";
  }
  line += s.steps > 0 ? str(s.step, "/", s.steps) : str("step ", s.step);
  char numbers[96];
  std::snprintf(numbers, sizeof(numbers), "  %.0f img/s  loss %.4f", s.images_per_s, s.loss);
  line += numbers;
  if (s.steps > 0 && s.step > 0 && s.step < s.steps) {
    const double eta =
        s.elapsed_s / static_cast<double>(s.step) * static_cast<double>(s.steps - s.step);
    line += "  ETA " + format_duration(eta);
  } else {
    line += "  " + format_duration(s.elapsed_s);
  }
  return line;
}

void ProgressDisplay::update(const ProgressState& state) {
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    const bool last = state.steps > 0 && state.step >= state.steps;
    if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    // ESC[K clears the rest of the line: a shorter line leaves nothing of the previous one.
    const int columns = columns_ > 0 ? columns_ : terminal_columns();
    out_ << '\r' << fit_line(state, columns) << "\x1b[K" << std::flush;
    line_open_ = true;
    return;
  }
  if (log_every_ > 0 && state.step % log_every_ == 0) {
    out_ << render(state, false) << '\n' << std::flush;
  }
}

void ProgressDisplay::finish_line() {
  if (line_open_) out_ << '\n' << std::flush;
  line_open_ = false;
}

void MetricsWriter::open(const std::string& path, bool append) {
  path_ = path;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  ECH_CHECK(out_.is_open(), path, ": cannot open metrics file for writing");
}

void MetricsWriter::write(const json::Value& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
  ECH_CHECK(out_.good(), path_, ": write failed (disk full?)");
}

json::Value EpochRecord::to_json() const {
  return json::Value::object()
      .set("type", "epoch")
      .set("epoch", epoch + 1)
      .set("global_step", global_step)
      .set("lr", lr)
      .set("train_loss", train_loss)
      .set("train_acc", train_acc)
      .set("test_loss", test_loss)
      .set("test_acc", test_acc)
      .set("train_images", train_images)
      .set("fresh_images", fresh_images)
      .set("train_s", train_s)
      .set("eval_s", eval_s)
      .set("images_per_s", images_per_s);
}

EpochRecord EpochRecord::from_json(const json::Value& v, int64_t epoch_base) {
  EpochRecord r;
  r.epoch = v.at("epoch").as_int() - epoch_base;
  ECH_CHECK(r.epoch >= 0, v.at("epoch").where(), ": epoch ", r.epoch + epoch_base,
            " (epochs count from ", epoch_base, ")");
  r.global_step = v.at("global_step").as_int();
  r.lr = v.at("lr").as_double();
  r.train_loss = v.at("train_loss").as_double();
  r.train_acc = v.at("train_acc").as_double();
  r.test_loss = v.at("test_loss").as_double();
  r.test_acc = v.at("test_acc").as_double();
  r.train_images = v.at("train_images").as_int();
  r.fresh_images = v.at("fresh_images").as_int();
  r.train_s = v.at("train_s").as_double();
  r.eval_s = v.at("eval_s").as_double();
  r.images_per_s = v.at("images_per_s").as_double();
  return r;
}

}  // namespace echelon::app
