// CUDA emulation: the launch model. Why this shape:
// - every CUDA thread is a Boost.Context fiber; a block runs to completion on the stream's worker
//   thread before the next block starts, so `__shared__` (thread_local) is per block;
// - a fiber runs until it reaches a barrier or a warp collective (or exits); then the first ready
//   thread in the block's priority order runs (forward, reverse, or a permutation redrawn at
//   every barrier). A warp whose collective completes thus runs on at once, ahead of the threads
//   after it: warps progress at very different speeds, as they may on a GPU, and what two
//   threads do between two barriers is serialised in that order, so a missing barrier turns into
//   a wrong result in at least one order instead of "works by luck";
// - a barrier is released only when every live thread of the block waits at the same one, a warp
//   collective only when every lane its mask names arrived with the same mask; anything else
//   (a lane that exited, a barrier in a branch, a deadlock) fails the launch with a message that
//   names the kernel, the block and the call site.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/context/fiber.hpp>

#include <echelon/cuda/sim/device.h>
#include <echelon/cuda/sim/internal.h>

namespace ctx = boost::context;

namespace echelon::cudasim {
namespace detail {

std::string site(const char* file, int line) {
  const char* slash = file ? std::strrchr(file, '/') : nullptr;
  return std::string(slash ? slash + 1 : (file ? file : "?")) + ":" + std::to_string(line);
}

// ---- fibers: pooled stacks with a guard page, and AddressSanitizer's switch annotations ---------

namespace {

#if ECH_SIM_ASAN
constexpr size_t kStackSize = size_t{512} << 10;  // ASan's redzones make frames much larger
#else
constexpr size_t kStackSize = size_t{64} << 10;
#endif

struct StackPool {
  std::vector<ctx::stack_context> idle;
  const void* last_bottom = nullptr;  // of the stack handed out last (for ASan)
  ~StackPool() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (const ctx::stack_context& s : idle) {
      ECH_SIM_UNPOISON(static_cast<char*>(s.sp) - s.size - page, s.size + page);
      munmap(static_cast<char*>(s.sp) - s.size - page, s.size + page);
    }
  }
};
thread_local StackPool t_stacks;

// Stacks are reused within a worker thread: a block of 1024 threads must not mmap 1024 stacks
// per launch. The page below each stack is PROT_NONE, so an overflow faults instead of
// corrupting the neighbour.
struct PooledStack {
  ctx::stack_context allocate() {
    ctx::stack_context s;
    if (!t_stacks.idle.empty()) {
      s = t_stacks.idle.back();
      t_stacks.idle.pop_back();
    } else {
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      void* mem = mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mem == MAP_FAILED) throw std::bad_alloc();
      ECH_SIM_UNPOISON(mem, kStackSize + page);  // what the range held before (internal.h)
      mprotect(mem, page, PROT_NONE);
      s.size = kStackSize;
      s.sp = static_cast<char*>(mem) + page + kStackSize;
    }
    t_stacks.last_bottom = static_cast<char*>(s.sp) - s.size;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { t_stacks.idle.push_back(s); }
};

struct Abort {};  // unwinds a CUDA thread's fiber when its block failed

struct AsyncCopy {
  void* dst;
  const void* src;
  size_t size, src_bytes;
};

struct SimThread {
  enum class State : uint8_t { Ready, Barrier, Warp, Exited };
  std::vector<AsyncCopy> queued;               // cp.async copies since the last commit
  std::deque<std::vector<AsyncCopy>> pending;  // committed groups not yet waited for, oldest first
  uint3 idx{};
  int linear = 0;
  State state = State::Ready;
  bool started = false;
  ctx::fiber fiber;  // the thread's context while suspended
  ctx::fiber back;   // the scheduler's context while the thread runs
  const void* stack_bottom = nullptr;
  const char* file = nullptr;  // where it waits
  int line = 0;
  int pred = 0, barrier_result = 0;
  WarpOp op = WarpOp::Syncwarp;
  unsigned mask = 0;
  int arg = 0, width = 32;
  uint64_t value = 0, result = 0;
#if ECH_SIM_ASAN
  void* fake_stack = nullptr;
  const void* back_bottom = nullptr;
  size_t back_size = 0;
#endif
};

struct Block {
  const Grid* grid = nullptr;
  std::vector<SimThread> threads;
  // The block's dynamic shared memory: `dynamic_bytes` from `dynamic_base`, 128-byte aligned
  // (a GPU's shared window starts aligned; WMMA fragment pointers must be 32-byte aligned).
  std::vector<unsigned char> dynamic_smem;
  unsigned char* dynamic_base = nullptr;
  size_t dynamic_bytes = 0;
  std::string error;
  bool aborting = false;
  int exited = 0;
  std::vector<int> priority;  // thread indices, highest priority first
  std::vector<int> rank;      // rank[thread] = its position in `priority`
  size_t wake = 0;            // lowest rank made ready by a warp collective since the last check
  // Per warp, the lanes in state Warp: an arriving lane finds the ones still missing without
  // visiting all 32 threads.
  std::vector<uint32_t> at_warp_op;
};

thread_local Block* t_block = nullptr;
thread_local SimThread* t_thread = nullptr;
thread_local Coordinates t_coords{};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Shfl:
      return "__shfl_sync";
    case WarpOp::ShflUp:
      return "__shfl_up_sync";
    case WarpOp::ShflDown:
      return "__shfl_down_sync";
    case WarpOp::ShflXor:
      return "__shfl_xor_sync";
    case WarpOp::Ballot:
      return "__ballot_sync";
    case WarpOp::Any:
      return "__any_sync";
    case WarpOp::All:
      return "__all_sync";
    case WarpOp::Syncwarp:
      return "__syncwarp";
  }
  return "?";
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Called on the CUDA thread's fiber: back to the scheduler until it resumes us.
void suspend(SimThread& t) {
#if ECH_SIM_ASAN
  __sanitizer_start_switch_fiber(&t.fake_stack, t.back_bottom, t.back_size);
#endif
  t.back = std::move(t.back).resume();
#if ECH_SIM_ASAN
  __sanitizer_finish_switch_fiber(t.fake_stack, &t.back_bottom, &t.back_size);
#endif
  if (t_block->aborting) throw Abort{};
}

void fail_block(Block& b, const std::string& why) {
  if (b.error.empty()) b.error = why;
}

// Called on the scheduler's context: runs thread t until it waits or exits.
void resume(Block& b, SimThread& t) {
  t_thread = &t;
  t_coords.thread_idx = t.idx;
  if (!t.started) {
    t.started = true;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack{}, [&b, &t](ctx::fiber&& back) {
      t.back = std::move(back);
#if ECH_SIM_ASAN
      __sanitizer_finish_switch_fiber(nullptr, &t.back_bottom, &t.back_size);
#endif
      if (!b.aborting) {
        try {
          b.grid->body();
        } catch (const Abort&) {
        } catch (const std::exception& e) {
          fail_block(b, std::string("the kernel threw: ") + e.what());
        }
      }
      t.state = SimThread::State::Exited;
      ++b.exited;
#if ECH_SIM_ASAN
      __sanitizer_start_switch_fiber(nullptr, t.back_bottom, t.back_size);
#endif
      return std::move(t.back);
    });
    t.stack_bottom = t_stacks.last_bottom;
  }
#if ECH_SIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t.stack_bottom, kStackSize);
#endif
  t.fiber = std::move(t.fiber).resume();
#if ECH_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  t_thread = nullptr;  // between fibers no CUDA thread runs (the fault handler reads it)
}

// Every lane that `t`'s mask names has arrived at a warp op: check they agree, compute results.
// Returns false (and fails the block) when they do not.
bool resolve_warp(Block& b, const SimThread& t) {
  const int base = t.linear / 32 * 32;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(t.mask >> lane & 1u)) continue;
    const SimThread& other = b.threads[static_cast<size_t>(base + lane)];
    if (other.op != t.op || other.mask != t.mask) {
      fail_block(b, std::string(op_name(t.op)) + "(mask " + hex(t.mask) + ") at " +
                        site(t.file, t.line) + " meets " + op_name(other.op) + "(mask " +
                        hex(other.mask) + ") at " + site(other.file, other.line) + " in lane " +
                        std::to_string(lane) + ": lanes of a mask must call the same collective");
      return false;
    }
  }
  const int width = t.width;
  if (width <= 0 || width > 32 || (width & (width - 1))) {
    fail_block(b, std::string(op_name(t.op)) + " at " + site(t.file, t.line) + ": width " +
                      std::to_string(width) + " is not a power of two <= 32");
    return false;
  }
  uint64_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane)
    if (t.mask >> lane & 1u && b.threads[static_cast<size_t>(base + lane)].value)
      ballot |= 1ull << lane;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(t.mask >> lane & 1u)) continue;
    SimThread& me = b.threads[static_cast<size_t>(base + lane)];
    const int seg = lane / width * width, arg = me.arg;
    int src = lane;
    switch (t.op) {
      case WarpOp::Shfl:
        src = seg + ((arg % width) + width) % width;
        break;
      case WarpOp::ShflUp:
        src = lane - seg >= arg ? lane - arg : lane;
        break;
      case WarpOp::ShflDown:
        src = lane - seg + arg < width ? lane + arg : lane;
        break;
      case WarpOp::ShflXor:
        src = (lane ^ arg) < seg + width ? lane ^ arg : lane;
        break;
      case WarpOp::Ballot:
        me.result = ballot;
        break;
      case WarpOp::Any:
        me.result = ballot != 0;
        break;
      case WarpOp::All:
        me.result = ballot == t.mask;
        break;
      case WarpOp::Syncwarp:
        break;
    }
    if (t.op <= WarpOp::ShflXor) {
      if (src < 0 || src >= 32 || !(t.mask >> src & 1u)) {
        fail_block(b, std::string(op_name(t.op)) + " at " + site(me.file, me.line) + ": lane " +
                          std::to_string(lane) + " reads lane " + std::to_string(src) +
                          ", which mask " + hex(t.mask) + " does not name");
        return false;
      }
      me.result = b.threads[static_cast<size_t>(base + src)].value;
    }
  }
  b.at_warp_op[static_cast<size_t>(t.linear / 32)] &= ~t.mask;
  for (int lane = 0; lane < 32; ++lane)
    if (t.mask >> lane & 1u) {
      b.threads[static_cast<size_t>(base + lane)].state = SimThread::State::Ready;
      b.wake = std::min(b.wake, static_cast<size_t>(b.rank[static_cast<size_t>(base + lane)]));
    }
  return true;
}

// Why a warp op cannot complete, or "" when every named lane is waiting at a warp op.
std::string warp_blocker(const Block& b, const SimThread& t) {
  const int n = static_cast<int>(b.threads.size());
  const int base = t.linear / 32 * 32, my_lane = t.linear % 32;
  // Built only for a verdict: this runs at every warp op of every lane.
  const auto what = [&] {
    return std::string(op_name(t.op)) + "(mask " + hex(t.mask) + ") at " + site(t.file, t.line) +
           " in warp " + std::to_string(t.linear / 32);
  };
  if (!(t.mask >> my_lane & 1u))
    return what() + ": lane " + std::to_string(my_lane) + " calls it with a mask without itself";
  // The named lanes not at a warp op yet, in lane order.
  for (uint32_t missing = t.mask & ~b.at_warp_op[static_cast<size_t>(t.linear / 32)]; missing != 0;
       missing &= missing - 1) {
    const int lane = std::countr_zero(missing);
    if (base + lane >= n)
      return what() + ": the mask names lane " + std::to_string(lane) +
             ", which does not exist (block of " + std::to_string(n) + " threads)";
    const SimThread& other = b.threads[static_cast<size_t>(base + lane)];
    if (other.state == SimThread::State::Exited)
      return what() + ": the mask names lane " + std::to_string(lane) + ", which has exited";
    if (other.state == SimThread::State::Barrier)
      return what() + ": lane " + std::to_string(lane) + " waits at __syncthreads() at " +
             site(other.file, other.line) + " instead (divergent warp)";
    return "-";  // still running: not a verdict yet
  }
  return "";
}

// Nobody is ready: release the barrier everyone waits at, or explain why the block is stuck.
void resolve_stall(Block& b) {
  const int n = static_cast<int>(b.threads.size());
  const SimThread* at_barrier = nullptr;
  int waiting = 0, pred_count = 0;
  for (const SimThread& t : b.threads) {
    if (t.state == SimThread::State::Warp) {
      const std::string why = warp_blocker(b, t);
      fail_block(b, why.empty() || why == "-" ? "deadlock at " + std::string(op_name(t.op)) +
                                                    " at " + site(t.file, t.line)
                                              : why);
      return;
    }
    if (t.state != SimThread::State::Barrier) continue;
    if (at_barrier && (t.file != at_barrier->file || t.line != at_barrier->line)) {
      fail_block(b, "threads wait at different __syncthreads(): " +
                        site(at_barrier->file, at_barrier->line) + " (thread " +
                        std::to_string(at_barrier->linear) + ") and " + site(t.file, t.line) +
                        " (thread " + std::to_string(t.linear) + ")");
      return;
    }
    at_barrier = &t;
    ++waiting;
    pred_count += t.pred;
  }
  if (b.exited > 0) {
    fail_block(b, "__syncthreads() at " + site(at_barrier->file, at_barrier->line) +
                      " reached by " + std::to_string(waiting) + " of " + std::to_string(n) +
                      " threads; " + std::to_string(b.exited) +
                      " exited without reaching it (a barrier in a branch not all threads take)");
    return;
  }
  for (SimThread& t : b.threads) {
    t.barrier_result = pred_count;
    t.state = SimThread::State::Ready;
  }
}

std::string describe(const Grid& g, const uint3& block) {
  std::ostringstream out;
  out << "kernel " << g.kernel << " (launched at " << site(g.file, g.line) << ", grid (" << g.grid.x
      << "," << g.grid.y << "," << g.grid.z << ") x block (" << g.block.x << "," << g.block.y << ","
      << g.block.z << "), order " << to_string(g.order) << "), block (" << block.x << "," << block.y
      << "," << block.z << "): ";
  return out.str();
}

// Bytes after a block's dynamic shared memory, filled before and checked after it runs: a kernel
// that writes past what its launch asked for fails instead of corrupting the heap.
constexpr ptrdiff_t kSharedGuard = 256;
constexpr unsigned char kGuardByte = 0xA5;

// Runs one block; false when it failed (the sticky error is set).
bool run_block(Block& b, const Grid& g, const uint3& block_idx, std::mt19937_64& rng) {
  const unsigned n = g.block.x * g.block.y * g.block.z;
  b.grid = &g;
  b.threads.clear();
  b.threads.resize(n);
  b.error.clear();
  b.aborting = false;
  b.exited = 0;
  std::fill(b.dynamic_base, b.dynamic_base + b.dynamic_bytes, 0xFF);
  std::fill_n(b.dynamic_base + b.dynamic_bytes, kSharedGuard, kGuardByte);
  t_coords.block_idx = block_idx;
  b.priority.resize(n);
  b.rank.resize(n);
  b.at_warp_op.assign((n + 31) / 32, 0);
  for (unsigned i = 0; i < n; ++i) {
    SimThread& t = b.threads[i];
    t.linear = static_cast<int>(i);
    t.idx = {i % g.block.x, i / g.block.x % g.block.y, i / (g.block.x * g.block.y)};
    b.priority[i] = static_cast<int>(g.order.kind == OrderKind::Reverse ? n - 1 - i : i);
  }
  const auto redraw = [&] {
    if (g.order.kind == OrderKind::Random) std::shuffle(b.priority.begin(), b.priority.end(), rng);
    for (unsigned i = 0; i < n; ++i)
      b.rank[static_cast<size_t>(b.priority[i])] = static_cast<int>(i);
  };
  redraw();
  size_t cursor = 0;  // every thread ranked before it is not ready
  while (b.error.empty() && b.exited < static_cast<int>(n)) {
    while (cursor < n &&
           b.threads[static_cast<size_t>(b.priority[cursor])].state != SimThread::State::Ready)
      ++cursor;
    if (cursor == n) {
      resolve_stall(b);  // releases a barrier (all ready again) or fails
      redraw();
      cursor = 0;
      continue;
    }
    b.wake = n;
    resume(b, b.threads[static_cast<size_t>(b.priority[cursor])]);
    cursor = std::min(cursor, b.wake);
  }
  const unsigned char* guard = b.dynamic_base + b.dynamic_bytes;
  if (b.error.empty() && std::count(guard, guard + kSharedGuard, kGuardByte) != kSharedGuard)
    b.error =
        "written past its " + std::to_string(b.dynamic_bytes) + " bytes of dynamic shared memory";
  if (b.error.empty()) return true;
  // Unwind every suspended fiber (and skip the ones never started) so all stacks are returned.
  b.aborting = true;
  for (SimThread& t : b.threads)
    if (t.state != SimThread::State::Exited) resume(b, t);
  fail(cudaErrorLaunchFailure, describe(g, block_idx) + b.error);
  return false;
}

}  // namespace

const Coordinates& coordinates() {
  return t_coords;
}

bool running_kernel(FaultSite& site) {
  const Block* b = t_block;
  if (!b || !b->grid) return false;
  site.kernel = b->grid->kernel;
  site.file = b->grid->file;
  site.line = b->grid->line;
  site.block = t_coords.block_idx;
  site.thread = t_coords.thread_idx;
  const SimThread* t = t_thread;
  site.stack_bottom = t ? t->stack_bottom : nullptr;
  site.stack_size = kStackSize;
  return true;
}

void* dynamic_shared() {
  return t_block ? t_block->dynamic_base : nullptr;
}

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                 int line) {
  SimThread& t = *t_thread;
  Block& b = *t_block;
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = width;
  t.file = file;
  t.line = line;
  t.state = SimThread::State::Warp;
  b.at_warp_op[static_cast<size_t>(t.linear / 32)] |= 1u << (t.linear % 32);
  const std::string why = warp_blocker(b, t);
  if (why.empty()) {
    resolve_warp(b, t);
  } else if (why != "-") {
    fail_block(b, why);
  }
  if (t.state != SimThread::State::Ready || !b.error.empty()) suspend(t);
  return t.result;
}

void device_error(const std::string& message) {
  fail_block(*t_block, message);
  suspend(*t_thread);  // the scheduler aborts the block: this throws Abort
  throw Abort{};
}

void async_copy(void* dst, const void* src, size_t size, size_t zfill, const char* file, int line) {
  const auto misaligned = [size](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % size != 0;
  };
  // Built only for an error: this runs at every copy.
  const auto what = [&] { return "__pipeline_memcpy_async at " + site(file, line) + ": "; };
  if (size != 4 && size != 8 && size != 16)
    device_error(what() + "size " + std::to_string(size) + " (must be 4, 8 or 16)");
  if (zfill > size)
    device_error(what() + "zfill " + std::to_string(zfill) + " exceeds the size " +
                 std::to_string(size));
  if (misaligned(dst) || misaligned(src))
    device_error(what() + "source or destination not aligned to the copy's " +
                 std::to_string(size) + " bytes");
  if (where(dst) != Where::Host)
    device_error(what() + "the destination is global memory (it must be shared)");
  const size_t src_bytes = size - zfill;
  if (src_bytes > 0 && where(src, src_bytes) == Where::Host)
    device_error(what() + "the source's " + std::to_string(src_bytes) +
                 " bytes are not inside a device allocation");
  std::memset(dst, 0xFF, size);  // undefined until waited for: NaN to whoever reads it early
  t_thread->queued.push_back({dst, src, size, src_bytes});
}

void async_commit() {
  SimThread& t = *t_thread;
  t.pending.push_back(std::move(t.queued));  // an empty group too, as cp.async.commit_group
  t.queued.clear();
}

void async_wait_prior(size_t prior) {
  SimThread& t = *t_thread;
  while (t.pending.size() > prior) {
    for (const AsyncCopy& c : t.pending.front()) {
      std::memcpy(c.dst, c.src, c.src_bytes);
      std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.size - c.src_bytes);
    }
    t.pending.pop_front();
  }
}

int barrier(int pred, const char* file, int line) {
  SimThread& t = *t_thread;
  t.state = SimThread::State::Barrier;
  t.file = file;
  t.line = line;
  t.pred = pred;
  suspend(t);
  return t.barrier_result;
}

void run_grid(const Grid& g) {
  if (failed()) return;  // a dead context runs nothing
  ensure_fault_handler();
  Block block;
  constexpr size_t kAlign = 128;
  block.dynamic_smem.resize(g.dynamic_smem + kAlign + static_cast<size_t>(kSharedGuard));
  const auto address = reinterpret_cast<uintptr_t>(block.dynamic_smem.data());
  block.dynamic_base = block.dynamic_smem.data() + (kAlign - address % kAlign) % kAlign;
  block.dynamic_bytes = g.dynamic_smem;
  t_block = &block;
  const uint64_t blocks = uint64_t{g.grid.x} * g.grid.y * g.grid.z;
  std::mt19937_64 rng(g.order.seed * 0x9E3779B97F4A7C15ull + g.launch_id);
  std::vector<uint64_t> sequence;
  if (g.order.kind == OrderKind::Random) {
    sequence.resize(blocks);
    for (uint64_t i = 0; i < blocks; ++i) sequence[i] = i;
    std::shuffle(sequence.begin(), sequence.end(), rng);
  }
  t_coords.block_dim = g.block;
  t_coords.grid_dim = g.grid;
  bool ok = true;
  for (uint64_t k = 0; k < blocks && ok; ++k) {
    const uint64_t i = g.order.kind == OrderKind::Random    ? sequence[k]
                       : g.order.kind == OrderKind::Reverse ? blocks - 1 - k
                                                            : k;
    const uint3 idx{static_cast<unsigned>(i % g.grid.x),
                    static_cast<unsigned>(i / g.grid.x % g.grid.y),
                    static_cast<unsigned>(i / (uint64_t{g.grid.x} * g.grid.y))};
    ok = run_block(block, g, idx, rng);
  }
  t_block = nullptr;
  count_launch(blocks, blocks * g.block.x * g.block.y * g.block.z);
  if (ok)
    check_guards("kernel " + std::string(g.kernel) + " (launched at " + site(g.file, g.line) + ")");
}

}  // namespace detail
}  // namespace echelon::cudasim
