// Thread names: set_thread_name / thread_name, and the names the CPU pool's workers and the data
// loader's stage threads carry (what `top -H` and `perf report --sort comm` show).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <echelon/base/thread_name.h>
#include <echelon/data/dataset.h>
#include <echelon/data/loader.h>
#include <echelon/tensor/cpu/fast/parallel.h>

using namespace echelon;

namespace {

// The names of this process's threads, from /proc/self/task/*/comm.
std::vector<std::string> process_thread_names() {
  std::vector<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.push_back(name);
  }
  return names;
}

bool has_thread(const std::string& name) {
  const std::vector<std::string> names = process_thread_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_SUITE("thread_names") {
  TEST_CASE("a thread's name is set, read back, and cut to Linux's 15 characters") {
    std::string seen, cut;
    std::thread([&] {
      set_thread_name("ech-test");
      seen = thread_name();
      set_thread_name("ech-a-name-longer-than-fifteen");
      cut = thread_name();
    }).join();
    CHECK(seen == "ech-test");
    CHECK(cut == "ech-a-name-long");
    std::atomic<bool> release{false};
    std::string named_by_starter;
    std::thread other([&] {
      while (!release.load()) std::this_thread::yield();
      named_by_starter = thread_name();
    });
    set_thread_name(other, "ech-other");
    release.store(true);
    other.join();
    CHECK(named_by_starter == "ech-other");
  }

  TEST_CASE("the CPU pool's workers are ech-pool-1 .. ech-pool-(N-1)") {
    const int before = cpu::fast::num_threads();
    cpu::fast::set_num_threads(3);
    CHECK(has_thread("ech-pool-1"));
    CHECK(has_thread("ech-pool-2"));
    CHECK_FALSE(has_thread("ech-pool-3"));
    cpu::fast::set_num_threads(before);
  }

  TEST_CASE("the loader's stage threads carry their stage's name; threadless stages have none") {
    // In memory the read runs in the decode workers; the source and the shuffle buffer never
    // have a thread (data/loader.h).
    for (const bool in_memory : {true, false}) {
      CAPTURE(in_memory);
      data::SyntheticOptions synthetic;
      synthetic.size = 4096;  // the rings fill, so every stage is still running below
      synthetic.read_cost_us = in_memory ? 0 : 1;
      data::LoaderOptions options;
      options.batch_size = 8;
      options.workers = 2;
      data::Loader loader(data::make_synthetic_dataset(synthetic), options);
      loader.start_epoch(0);
      REQUIRE(loader.next().has_value());  // the threads run while the epoch does
      for (const char* name : {"ech-decode", "ech-decode-1", "ech-augment-1", "ech-batch"})
        CHECK_MESSAGE(has_thread(name), std::string(name));
      CHECK(has_thread("ech-read") == !in_memory);
      CHECK(has_thread("ech-read-1") == !in_memory);
      CHECK_FALSE(has_thread("ech-source"));
      CHECK_FALSE(has_thread("ech-shuffle"));
    }
    // One worker, in memory: the whole pipeline on one thread.
    data::LoaderOptions options;
    options.batch_size = 8;
    options.workers = 1;
    data::SyntheticOptions synthetic;
    synthetic.size = 4096;
    data::Loader loader(data::make_synthetic_dataset(synthetic), options);
    loader.start_epoch(0);
    REQUIRE(loader.next().has_value());
    CHECK(has_thread("ech-loader"));
    CHECK_FALSE(has_thread("ech-batch"));
  }
}
