// The topology report of a multi-process run (app/cli/dist_flags.h): each rank's CPUs as Linux
// lists them, and the warning for a rank with more --threads than CPUs it may run on (mpirun
// binds each rank to one core by default). The report itself: tests/mpi/cli_check.sh.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <echelon/app/cli/dist_flags.h>

using namespace echelon::app;

TEST_SUITE("cli") {
  TEST_CASE("a CPU list is written as Linux writes it: ranges of consecutive CPUs") {
    CHECK(cpu_list_text({}).empty());
    CHECK(cpu_list_text({0}) == "0");
    CHECK(cpu_list_text({0, 1}) == "0-1");
    CHECK(cpu_list_text({0, 1, 2, 5}) == "0-2,5");
    CHECK(cpu_list_text({1, 3, 4, 5, 7, 9, 10}) == "1,3-5,7,9-10");
  }

  TEST_CASE("this process may run on at least one CPU, listed in order") {
    const std::vector<int> cpus = allowed_cpus();
    REQUIRE(!cpus.empty());
    for (size_t i = 1; i < cpus.size(); ++i) CHECK(cpus[i - 1] < cpus[i]);
  }

  TEST_CASE("more --threads than CPUs warns, naming the rank, its CPUs and the mpirun flag") {
    const std::string warning = binding_warning(1, "3", 1, 2);
    CHECK(warning.find("rank 1 may run on 1 CPU (3) but has --threads 2") != std::string::npos);
    CHECK(warning.find("--bind-to none") != std::string::npos);
    CHECK(binding_warning(0, "0-1", 2, 2).empty());  // as many threads as CPUs
    CHECK(binding_warning(0, "0", 1, 0).empty());    // --threads 0: the default, one thread
    CHECK(binding_warning(0, "", 0, 4).empty());     // the affinity could not be read
  }
}
