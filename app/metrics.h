// What a training run shows and records while it runs: the progress display (a bar redrawn with
// \r on a terminal, plain periodic lines in a log), the metrics.jsonl writer and the history of
// per-epoch results that summary.json and report.html are built from.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <echelon/base/json.h>

namespace echelon::app {

// "1:02:03", "4:05" for seconds (rounded); "?" for negative or non-finite input.
std::string format_duration(double seconds);
// "12.34%" for 0.1234.
std::string format_percent(double fraction);

// The state shown on one progress update.
struct ProgressState {
  int64_t epoch = 0, epochs = 0;  // epoch from 0; shown as epoch+1/epochs
  int64_t step = 0, steps = 0;    // steps done in this epoch / expected per epoch (0: unknown)
  double images_per_s = 0;
  double loss = 0;       // running mean training loss of the epoch
  double elapsed_s = 0;  // since the epoch started
};

class ProgressDisplay {
 public:
  // tty: redraw one line with \r (throttled to ~10 redraws/s); otherwise print a plain line
  // every `log_every` steps. A log_every of 0 prints only at epoch ends.
  // A tty bar fits `columns` (0: the terminal's width, from TIOCGWINSZ, $COLUMNS, or 80).
  ProgressDisplay(std::ostream& out, bool tty, int64_t log_every, int columns = 0);
  void update(const ProgressState& state);
  // Ends the bar's line (tty) so the next output starts on a fresh line.
  void finish_line();

  // One progress line (exposed for tests): "epoch 2/10 [#####.....] 469/938 ..."
  static std::string render(const ProgressState& state, bool with_bar, int bar_width = 24);
  // The tty line for a terminal `columns` wide: shorter than that (a line that fills the last
  // column wraps on some terminals), the bar taking what the numbers leave (at most 30 cells,
  // none below 5), and cut at the end when even the numbers do not fit.
  static std::string fit_line(const ProgressState& state, int columns);

 private:
  std::ostream& out_;
  bool tty_;
  int64_t log_every_;
  int columns_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// True when the file descriptor (1 = stdout, 2 = stderr) is a terminal.
bool is_terminal(int fd);
// The terminal's width in columns: TIOCGWINSZ on stdout, else $COLUMNS, else 80.
int terminal_columns();

// Appends one compact JSON object per line to DIR/metrics.jsonl, flushed per line so a crash
// loses at most the line being written.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // append: keep earlier lines (resume), else truncate.
  void open(const std::string& path, bool append);
  bool is_open() const { return out_.is_open(); }
  void write(const json::Value& record);
  const std::string& path() const { return path_; }

 private:
  std::ofstream out_;
  std::string path_;
};

// One finished epoch.
struct EpochRecord {
  int64_t epoch = 0;  // from 0
  double lr = 0;      // at the epoch's last step
  double train_loss = 0, train_acc = 0;
  double test_loss = 0, test_acc = 0;
  int64_t train_images = 0;  // examples consumed (with echoes)
  int64_t fresh_images = 0;  // first copies only
  double train_s = 0, eval_s = 0;
  double images_per_s = 0;  // train_images / train_s
  int64_t global_step = 0;  // optimizer steps done after this epoch

  // {"type":"epoch", "epoch": N, ...}: in files epochs count from 1, as the console and
  // summary.json's best_epoch do. from_json reads `epoch_base`-based numbers (checkpoints written
  // before epoch_base was recorded count from 0).
  json::Value to_json() const;
  static EpochRecord from_json(const json::Value& v, int64_t epoch_base = 1);
};

// A sampled training-loss point for the loss curve.
struct StepPoint {
  int64_t global_step = 0;
  double epoch = 0;  // fractional epoch
  double loss = 0;   // mean loss over the batches since the previous point
};

}  // namespace echelon::app
