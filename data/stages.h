// The staged-pipeline machinery behind Loader: typed stages joined by rings, each stage run by
// N worker threads, one shared control block for stop and the first error.
//
//   MpmcRing<A> a(64); MpmcRing<B> b(64);
//   PipelineControl control;  control.on_abort([&] { a.close(); b.close(); });
//   StageCounters decode_stats("decode", workers);
//   start_stage<A, B>(threads, control, decode_stats, workers, a, b,
//                     [](A&& item, auto&& emit) { emit(B(...)); }, [](const A& a) { return a.index;
//                     });
//
// run_stage_inline is the same stage on the calling thread, for the loader's inline mode.
//
// A worker pops an item, calls fn(item, emit) and pushes what fn emits; the last worker of a
// stage to finish closes the stage's output ring, so end-of-stream flows downstream. When fn
// throws, the error is wrapped as "data pipeline: stage '<name>' failed on item <index>: ..."
// and the control block stops every stage (closing every ring, so no thread stays blocked).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/base/thread_name.h>

namespace echelon::data {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class PipelineControl {
 public:
  bool stopped() const { return stop_.load(std::memory_order_acquire); }
  // Registers what stopping means (closing every ring). Call before starting threads.
  void on_abort(std::function<void()> abort) { abort_ = std::move(abort); }
  // Stops every stage (idempotent, any thread).
  void stop() {
    if (!stop_.exchange(true, std::memory_order_acq_rel) && abort_) abort_();
  }
  // Records the first failure (later ones are dropped: they are usually consequences) and stops.
  void fail(const std::string& stage, int64_t item, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);  // error path only
      if (!error_)
        error_ = std::make_exception_ptr(
            Error(str("data pipeline: stage '", stage, "' failed on item ", item, ": ", what)));
    }
    stop();
  }
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::function<void()> abort_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

// Per-stage counters, updated by the stage's workers with relaxed atomics (statistics only).
struct StageCounters {
  StageCounters(std::string stage_name, int stage_workers)
      : name(std::move(stage_name)), workers(stage_workers) {}
  std::string name;
  int workers;
  std::atomic<int64_t> inputs{0};   // items taken from the input ring
  std::atomic<int64_t> outputs{0};  // items pushed to the output ring
  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> stall_ns{0};
  std::atomic<int> running{0};
  // LoaderOptions::on_work, or null: told about every item a worker finished.
  const std::function<void(const std::string&, int, int64_t, Clock::time_point, Clock::time_point)>*
      on_work = nullptr;

  void add_busy(Clock::duration d) { busy_ns.fetch_add(to_ns(d), std::memory_order_relaxed); }
  void add_stall(Clock::duration d) { stall_ns.fetch_add(to_ns(d), std::memory_order_relaxed); }
  void traced(int worker, int64_t item, Clock::time_point start) const {
    if (on_work && *on_work) (*on_work)(name, worker, item, start, Clock::now());
  }
  static int64_t to_ns(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
};

// Starts `workers` threads of one stage (In -> Out). fn(In&& item, Emit& emit) may emit zero or
// more outputs; emit(Out) returns false once the pipeline is stopping. index_of(item) names the
// item in error messages. `in` is a ring, or anything with pop() (or pop(int worker)) returning
// std::optional<In>, nullopt at the end; it must not throw.
template <typename In, typename Out, typename InRing, typename OutRing, typename Fn,
          typename IndexOf>
void start_stage(std::vector<std::thread>& threads, PipelineControl& control,
                 StageCounters& counters, int workers, InRing& in, OutRing& out, Fn fn,
                 IndexOf index_of) {
  counters.running.store(workers);
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&control, &counters, &in, &out, fn, index_of, w] {
      Clock::duration emit_stall{};  // this worker's time blocked in emit()
      // Timed only when the ring is full: a push that goes through at once waited for nothing
      // (clock reads were a tenth of an in-memory example's cost in the loader's threads).
      auto emit = [&](Out value) {
        bool pushed = out.try_push(value);  // leaves `value` alone when it fails
        if (!pushed) {
          const auto start = Clock::now();
          pushed = out.push(std::move(value));
          emit_stall += Clock::now() - start;
        }
        if (pushed) counters.outputs.fetch_add(1, std::memory_order_relaxed);
        return pushed;
      };
      auto wait_start = Clock::now();  // then the end of the previous item's work
      while (!control.stopped()) {
        std::optional<In> item;
        if constexpr (requires { in.pop(w); })
          item = in.pop(w);  // a source that is told the worker (for its trace calls)
        else
          item = in.pop();
        const auto work_start = Clock::now();
        counters.add_stall(work_start - wait_start);
        if (!item) break;
        counters.inputs.fetch_add(1, std::memory_order_relaxed);
        const int64_t index = index_of(*item);
        try {
          emit_stall = {};
          fn(std::move(*item), emit);
          // Busy = the call minus the time emit() spent blocked on a full output ring.
          wait_start = Clock::now();
          counters.add_busy(wait_start - work_start - emit_stall);
          counters.add_stall(emit_stall);
          counters.traced(w, index, work_start);
        } catch (const std::exception& e) {
          control.fail(counters.name, index, message_of(e));
          break;
        }
      }
      if (counters.running.fetch_sub(1) == 1) out.close();  // last worker ends the stream
    });
    // "ech-read", "ech-read-1", ...; the fused stage is "ech-dec+aug" (Linux keeps 15 chars).
    const std::string stage = counters.name == "decode+augment" ? "dec+aug" : counters.name;
    set_thread_name(threads.back(), "ech-" + stage + (w > 0 ? "-" + std::to_string(w) : ""));
  }
}

// The inline twin of start_stage (LoaderOptions::workers = 0): runs fn over the items of `in` on
// the calling thread, `out` collecting what it emits (cleared first), with the same counters,
// trace calls (worker 0) and error wrapping. Returns false when fn threw (the error is in
// `control`, which is stopped) or the pipeline is stopping.
template <typename In, typename Out, typename Fn, typename IndexOf>
bool run_stage_inline(PipelineControl& control, StageCounters& counters, std::vector<In>& in,
                      std::vector<Out>& out, Fn fn, IndexOf index_of) {
  out.clear();
  auto emit = [&](Out value) {
    out.push_back(std::move(value));
    counters.outputs.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  for (In& item : in) {
    if (control.stopped()) return false;
    counters.inputs.fetch_add(1, std::memory_order_relaxed);
    const int64_t index = index_of(item);
    const auto work_start = Clock::now();
    try {
      fn(std::move(item), emit);
    } catch (const std::exception& e) {
      control.fail(counters.name, index, message_of(e));
      return false;
    }
    counters.add_busy(Clock::now() - work_start);
    counters.traced(0, index, work_start);
  }
  return !control.stopped();
}

}  // namespace echelon::data
