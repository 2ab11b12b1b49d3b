// `echelon launch`: the mpirun command line it builds (--dry-run), the variables it gives each rank
// with --rdzv env, and its one-line errors. The real multi-process launches are in
// tests/mpi/cli_check.sh and tests/mpi/rendezvous_check.sh (label mpi).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/cli_run.h"

using echelon::test::check_usage_error;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;

namespace {

bool launch_available() {
  if (!std::filesystem::exists(kBinary)) return false;
  const Run r = run("launch --dry-run -- train --pipeline 2");
  if (r.err.find("built without MPI") == std::string::npos) return true;
  MESSAGE("echelon built without MPI: launch tests skipped");
  return false;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("launch builds one mpirun command from the train flags") {
    if (!launch_available()) return;
    const Run r =
        run("launch --dry-run -- train --model lenet5 --data synthetic --pipeline 2 "
            "--data-parallel 2 --out 'my run'");
    REQUIRE(r.status == 0);
    CHECK(r.out.rfind("mpirun ", 0) == 0);
    CHECK(r.out.find(" --bind-to none ") != std::string::npos);
    CHECK(r.out.find(" --oversubscribe ") != std::string::npos);
    // K x R = 4 processes, each running this very binary with the train command unchanged.
    CHECK(r.out.find(" -np 4 " + std::filesystem::canonical(kBinary).string() +
                     " train --model lenet5 --data synthetic --pipeline 2 --data-parallel 2 "
                     "--out 'my run'\n") != std::string::npos);

    const Run named = run("launch --dry-run --mpirun /opt/mpi/bin/mpirun -- train --pipeline 3");
    CHECK(named.out.rfind("/opt/mpi/bin/mpirun ", 0) == 0);
    CHECK(named.out.find(" -np 3 ") != std::string::npos);

    const std::string hostfile = (echelon::test::temp_dir("launch") / "hosts").string();
    { std::ofstream(hostfile) << "node1 slots=2\nnode2 slots=2\n"; }
    const Run nodes = run("launch --dry-run --nnodes 2 --hostfile " + hostfile +
                          " -- train --pipeline 2 --data-parallel 2");
    CHECK(nodes.status == 0);
    CHECK(nodes.out.find(" --hostfile " + hostfile + " --map-by ppr:2:node ") != std::string::npos);
    CHECK(nodes.out.find(" --oversubscribe ") == std::string::npos);
  }

  TEST_CASE("launch --rdzv env gives each local rank torchrun's variables") {
    if (!launch_available()) return;
    const Run r = run(
        "launch --rdzv env --dry-run --master-port 29611 -- train --pipeline 2 --data-parallel 2");
    REQUIRE(r.status == 0);
    const std::string command = " " + std::filesystem::canonical(kBinary).string() +
                                " train --pipeline 2 --data-parallel 2\n";
    for (int rank = 0; rank < 4; ++rank) {
      CHECK(r.out.find("RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                       " WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611" +
                       command) != std::string::npos);
    }
    // Node 1 of 2 runs ranks 2 and 3, as local ranks 0 and 1, and meets rank 0 at node0.
    const Run second =
        run("launch --rdzv env --dry-run --nnodes 2 --node-rank 1 --master-addr node0 -- train "
            "--pipeline 4");
    REQUIRE(second.status == 0);
    CHECK(second.out.find("RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=node0 "
                          "MASTER_PORT=29500 ") == 0);
    CHECK(second.out.find("\nRANK=3 LOCAL_RANK=1 ") != std::string::npos);
    CHECK(second.out.find("\nRANK=0") == std::string::npos);
    check_usage_error("launch --rdzv env --nnodes 2 --node-rank 2 -- train --pipeline 4",
                      "--node-rank 2 must be in [0, --nnodes 2)");
    check_usage_error("launch --rdzv env --master-port 70000 -- train --pipeline 2",
                      "--master-port 70000 is not a TCP port");
    check_usage_error("launch --rdzv ssh -- train --pipeline 2", "--rdzv");
  }

  TEST_CASE("launch refuses what mpirun could not run, before any process starts") {
    if (!launch_available()) return;
    check_usage_error("launch", "give the run after --");
    check_usage_error("launch -- eval --checkpoint x", "starts `train` runs only (got 'eval')");
    check_usage_error("launch -- train", "is one process: run `echelon train` directly");
    check_usage_error("launch --nproc-per-node 3 -- train --pipeline 2",
                      "3 processes, but --pipeline 2 x --data-parallel 1 needs 2");
    check_usage_error("launch --nnodes 2 -- train --pipeline 2", "--nnodes 2 needs --hostfile");
    check_usage_error("launch --nnodes 2 --hostfile /no/such/file -- train --pipeline 2",
                      "--hostfile '/no/such/file' is not a file");
    const std::string hostfile = (echelon::test::temp_dir("launch") / "hosts").string();
    { std::ofstream(hostfile) << "node1\nnode2\n"; }
    check_usage_error("launch --nnodes 2 --hostfile " + hostfile + " -- train --pipeline 3",
                      "do not split evenly over --nnodes 2");
    check_usage_error("launch -- train --pipeline 2 --no-such-flag", "--no-such-flag");
    // A launch flag after -- (once: "The following arguments were not expected: 2 --nproc...").
    check_usage_error(
        "launch -- train --pipeline 2 --nproc-per-node 2",
        "launch: --nproc-per-node is a flag of launch, not of train: put it before --");
    check_usage_error("launch -- train --pipeline 2 --dry-run", "--dry-run is a flag of launch");
    check_usage_error("launch -- train --pipeline 2 --master-port=29501",
                      "--master-port is a flag of launch");
    check_usage_error("launch --mpirun /no/such/mpirun -- train --pipeline 2",
                      "cannot start '/no/such/mpirun'");
  }
}
