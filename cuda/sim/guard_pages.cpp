// CUDA emulation: device memory in mappings of its own, between guard regions that fault. Why:
// - the 256 guard bytes around an allocation (runtime.cpp) catch a small overrun, but only after
//   the kernel, and a write further out used to land in the host heap: a planted bound mutant
//   (`conv-bounds-32-bit`, bench/RESULTS.md session 45) then ended in glibc's heap checks, a
//   crash or a hang, far from the kernel that did it;
// - so every allocation is its own mapping, with kGuardRegion of PROT_NONE address space on each
//   side. The first access there faults; the handler records the kernel, block, thread and offset,
//   opens that page so the access completes, and check_guards() (after the kernel) turns the
//   record into the sticky error, as a GPU's illegal-address fault. The page is closed again;
// - a fault anywhere else (no allocation's guard region) is not survivable: the handler prints
//   the kernel and thread, or a CUDA thread's stack overflow, and hands the signal to the handler
//   it replaced (AddressSanitizer's, doctest's, or the default: a core dump).
// The handler allocates nothing and takes no lock: the registry is a fixed table of atomics.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include <echelon/cuda/sim/internal.h>

namespace echelon::cudasim::detail {
namespace {

// PROT_NONE bytes on each side of an allocation: address space only, no memory.
constexpr size_t kGuardRegion = size_t{1} << 20;
constexpr size_t kSlots = size_t{1} << 15;  // live allocations the handler can name
constexpr size_t kOpenPages = 256;          // guard pages opened between two checks
constexpr size_t kAltStack = size_t{64} << 10;

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// One live allocation: its whole mapping [start, end), the user range [user, user + size).
struct Slot {
  std::atomic<uintptr_t> start{0};  // 0: free, 1: being filled
  uintptr_t end = 0, user = 0;
  size_t size = 0;
};
Slot g_slots[kSlots];
std::atomic<size_t> g_slots_used{0};  // high-water mark: the handler scans no further

std::atomic<uintptr_t> g_open[kOpenPages];  // opened guard pages, 0 = none

struct Record {
  uintptr_t address = 0, user = 0;
  size_t size = 0;
  int access = 0;  // 1 read, 2 write, 0 unknown
  bool in_kernel = false;
  FaultSite site{};
};
std::atomic<bool> g_claimed{false}, g_recorded{false};
Record g_record;

// The handlers this one replaced, called for every fault it cannot survive. Reinstalled over
// whoever took the signals since (doctest installs its own around every test case).
std::mutex g_install_mutex;
struct sigaction g_previous_segv, g_previous_bus;
std::atomic<bool> g_chained{false};

// Text for the fatal path, built without allocating.
struct Line {
  char text[512];
  size_t n = 0;
  Line& put(const char* s) {
    while (s && *s && n + 1 < sizeof text) text[n++] = *s++;
    return *this;
  }
  Line& put(uint64_t v, int base = 10) {
    char digits[24];
    int k = 0;
    do {
      digits[k++] = "0123456789abcdef"[v % static_cast<uint64_t>(base)];
      v /= static_cast<uint64_t>(base);
    } while (v);
    if (base == 16) put("0x");
    while (k && n + 1 < sizeof text) text[n++] = digits[--k];
    return *this;
  }
  Line& put(const uint3& v) {
    return put("(").put(v.x).put(",").put(v.y).put(",").put(v.z).put(")");
  }
};

int access_of(void* context) {
#if defined(__x86_64__)
  // The page-fault error code: bit 1 is set for a write.
  const auto* uc = static_cast<const ucontext_t*>(context);
  return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 2 : 1;
#else
  (void)context;
  return 0;
#endif
}

const Slot* slot_of(uintptr_t address) {
  const size_t used = g_slots_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < used; ++i) {
    const uintptr_t start = g_slots[i].start.load(std::memory_order_acquire);
    if (start > 1 && address >= start && address < g_slots[i].end) return &g_slots[i];
  }
  return nullptr;
}

bool open_page(uintptr_t page) {
  for (auto& open : g_open) {
    uintptr_t none = 0;
    if (open.compare_exchange_strong(none, page))
      return mprotect(reinterpret_cast<void*>(page), page_size(), PROT_READ | PROT_WRITE) == 0;
  }
  return false;  // too many: the access stays fatal
}

// Not the emulator's to survive (nor, in host code, to describe): the replaced handler takes it,
// called directly (doctest's names the test case, AddressSanitizer's prints the stack). Once only:
// a handler that re-raises the signal reaches this one again, and the default action then ends
// the process when the access runs again.
void chain(int signal, siginfo_t* info, void* context) {
  const struct sigaction& previous = signal == SIGBUS ? g_previous_bus : g_previous_segv;
  if (!g_chained.exchange(true)) {
    if (previous.sa_flags & SA_SIGINFO) return previous.sa_sigaction(signal, info, context);
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN)
      return previous.sa_handler(signal);
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(signal, &fallback, nullptr);
}

// A fault the emulator cannot survive: says which CUDA thread made it, then hands the signal on.
void fatal(int signal, siginfo_t* info, void* context, const char* where) {
  FaultSite site{};
  if (running_kernel(site)) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    Line line;
    line.put("cudasim: ").put(signal == SIGBUS ? "bus error" : "segmentation fault");
    const char* file = site.file ? site.file : "?";
    for (const char* c = file; *c; ++c)
      if (*c == '/') file = c + 1;  // the last path component, as site() writes it
    line.put(" in kernel ").put(site.kernel).put(" (launched at ").put(file).put(":");
    line.put(static_cast<uint64_t>(site.line)).put("), block ").put(site.block);
    line.put(", thread ").put(site.thread);
    const auto bottom = reinterpret_cast<uintptr_t>(site.stack_bottom);
    if (bottom && address < bottom && address + page_size() >= bottom) {
      line.put(": its stack of ").put(site.stack_size >> 10);
      line.put(" KiB overflowed (deep recursion or a large local array?)\n");
    } else {
      line.put(": access at ").put(address, 16).put(", ").put(where).put("\n");
    }
    const ssize_t ignored = write(STDERR_FILENO, line.text, line.n);
    (void)ignored;
  }
  chain(signal, info, context);
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  // Only guard regions fault inside a slot's mapping: the rest of it is read-write.
  // si_code <= 0: sent (raise, kill), not an access.
  const Slot* slot = signal == SIGSEGV && info->si_code > 0 ? slot_of(address) : nullptr;
  if (!slot) {
    fatal(signal, info, context, "outside every device allocation and its guard region");
  } else if (!open_page(address / page_size() * page_size())) {
    fatal(signal, info, context, "in a guard region (too many guard pages touched to go on)");
  } else if (!g_claimed.exchange(true)) {  // the first access is the one worth reading
    g_record.address = address;
    g_record.user = slot->user;
    g_record.size = slot->size;
    g_record.access = access_of(context);
    g_record.in_kernel = running_kernel(g_record.site);
    g_recorded.store(true, std::memory_order_release);
  }
  errno = saved_errno;
}

// The calling thread's alternate signal stack, so that a fiber's stack overflow can be reported.
struct AltStack {
  void* memory = nullptr;
  AltStack() {
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
    memory = mmap(nullptr, kAltStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      memory = nullptr;
      return;
    }
    stack_t alt{};
    alt.ss_sp = memory;
    alt.ss_size = kAltStack;
    sigaltstack(&alt, nullptr);
  }
  ~AltStack() {
    if (!memory) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    munmap(memory, kAltStack);
  }
};

std::string describe(const Record& r) {
  std::string where;
  if (r.address >= r.user + r.size)
    where = std::to_string(r.address - r.user - r.size) + " bytes past the end of";
  else
    where = std::to_string(r.user - r.address) + " bytes before the start of";
  std::string text = r.in_kernel ? "kernel " + std::string(r.site.kernel) + " (launched at " +
                                       site(r.site.file, r.site.line) + ")"
                                 : std::string("host code");
  text += ": out-of-bounds ";
  text += r.access == 2 ? "write" : r.access == 1 ? "read" : "access";
  text += " " + where + " a device allocation of " + std::to_string(r.size) + " bytes";
  if (r.in_kernel) {
    const auto coords = [](const uint3& v) {
      return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) +
             ")";
    };
    text += ", by block " + coords(r.site.block) + " thread " + coords(r.site.thread);
  }
  return text + " (a guard page)";
}

}  // namespace

void ensure_fault_handler() {
  struct sigaction current {};
  sigaction(SIGSEGV, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_fault) return;
  std::lock_guard lock(g_install_mutex);
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (const auto& [signal, previous] :
       {std::pair{SIGSEGV, &g_previous_segv}, {SIGBUS, &g_previous_bus}}) {
    sigaction(signal, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_fault) continue;
    sigaction(signal, &action, previous);
  }
}

bool map_device_memory(size_t size, DeviceMapping& out) {
  ensure_fault_handler();
  const size_t page = page_size();
  const size_t padded = (size + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  const size_t rw = (padded + 2 * kGuardBytes + page - 1) / page * page;
  const size_t length = rw + 2 * kGuardRegion;
  void* start =
      mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (start == MAP_FAILED) return false;
  auto* bytes = static_cast<unsigned char*>(start);
  ECH_SIM_UNPOISON(bytes, length);
  if (mprotect(bytes + kGuardRegion, rw, PROT_READ | PROT_WRITE) != 0) {
    munmap(start, length);
    return false;
  }
  out.start = bytes;
  out.length = length;
  out.front = bytes + kGuardRegion;
  out.user = out.front + rw - kGuardBytes - padded;  // the back guard bytes end at a page end
  out.slot = kSlots;
  for (size_t i = 0; i < kSlots; ++i) {
    uintptr_t free = 0;
    if (!g_slots[i].start.compare_exchange_strong(free, 1)) continue;
    g_slots[i].end = reinterpret_cast<uintptr_t>(bytes + length);
    g_slots[i].user = reinterpret_cast<uintptr_t>(out.user);
    g_slots[i].size = size;
    g_slots[i].start.store(reinterpret_cast<uintptr_t>(bytes), std::memory_order_release);
    size_t used = g_slots_used.load();
    while (used < i + 1 && !g_slots_used.compare_exchange_weak(used, i + 1)) {
    }
    out.slot = i;
    break;
  }
  return true;
}

void unmap_device_memory(const DeviceMapping& m) {
  if (m.slot < kSlots) g_slots[m.slot].start.store(0, std::memory_order_release);
  ECH_SIM_UNPOISON(m.start, m.length);  // the guard bytes' poison must not outlive the mapping
  munmap(m.start, m.length);
}

std::string take_guard_fault() {
  if (!g_recorded.load(std::memory_order_acquire)) return {};
  const std::string text = describe(g_record);
  for (auto& open : g_open) {
    const uintptr_t page = open.exchange(0);
    if (!page) continue;
    auto* p = reinterpret_cast<void*>(page);
    madvise(p, page_size(), MADV_DONTNEED);  // what the stray access wrote is dropped
    mprotect(p, page_size(), PROT_NONE);
  }
  g_recorded.store(false);
  g_claimed.store(false);
  return text;
}

void prepare_fault_stack() {
  thread_local AltStack stack;
}

}  // namespace echelon::cudasim::detail
