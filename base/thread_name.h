// Names for the threads Echelon starts, so `top -H`, `perf report --sort comm`, gdb and
// /proc/<pid>/task/*/comm tell the data loader's stages, the CPU pool's workers and the pipeline's
// partitions apart.
#pragma once

#include <string>
#include <thread>

namespace echelon {

// Names a thread, e.g. "ech-decode" or "ech-pool-1". Linux keeps 15 characters; longer names are
// cut. Best effort: where the platform cannot, nothing happens. Name a thread from the thread that
// starts it, right after starting it: then the name is there when the constructor returns.
void set_thread_name(std::thread& thread, const std::string& name);
// Names the calling thread.
void set_thread_name(const std::string& name);

// The calling thread's name ("" where the platform cannot tell).
std::string thread_name();

}  // namespace echelon
