// --devices: the device list -> one device per partition, and the CLI's one-line errors. The
// training run on two (emulated) GPUs is tests/cudasim's cudasim_train_two_devices.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/parallel/partition.h>

#include "tests/support/cli_run.h"

using echelon::Device;
using echelon::parallel::parse_partition_devices;

TEST_SUITE("pipeline") {
  TEST_CASE("a device list places one partition per device, or neighbours together") {
    CHECK(parse_partition_devices("cuda:0,cuda:1", 2) ==
          std::vector<Device>{Device::cuda(0), Device::cuda(1)});
    CHECK(parse_partition_devices("cuda:1,cuda:0", 4) ==
          std::vector<Device>{Device::cuda(1), Device::cuda(1), Device::cuda(0), Device::cuda(0)});
    CHECK(parse_partition_devices("cuda", 3) == std::vector<Device>(3, Device::cuda(0)));
    CHECK(parse_partition_devices("cpu,cuda:0", 2) ==
          std::vector<Device>{Device::cpu(), Device::cuda(0)});
  }

  TEST_CASE("a bad device list is refused naming the text and the entry") {
    CHECK_THROWS_WITH_AS(parse_partition_devices("cuda:0,,cuda:1", 3),
                         doctest::Contains("empty entry"), echelon::Error);
    CHECK_THROWS_WITH_AS(parse_partition_devices("cuda:0,", 2),
                         doctest::Contains("expected comma-separated devices"), echelon::Error);
    CHECK_THROWS_WITH_AS(parse_partition_devices("gpu:0", 2),
                         doctest::Contains("'gpu:0' is not a device"), echelon::Error);
    CHECK_THROWS_WITH_AS(parse_partition_devices("cuda:0,cuda:1,cuda:2", 4),
                         doctest::Contains("3 devices for 4 partitions"), echelon::Error);
    CHECK_THROWS_WITH_AS(parse_partition_devices("cuda:0,cuda:1,cuda:2", 2),
                         doctest::Contains("3 devices for 2 partitions"), echelon::Error);
  }
}

TEST_SUITE("cli") {
  TEST_CASE("--devices errors are one line naming the flag, before any run folder exists") {
    if (!std::filesystem::exists(echelon::test::kBinary)) return;
    using echelon::test::check_usage_error;
    check_usage_error("train --data synthetic --devices cuda:0",
                      "--devices needs a pipeline: add --pipeline K");
    check_usage_error("train --data synthetic --pipeline 4 --devices cuda:0,cuda:1,cuda:2",
                      "--devices: device list 'cuda:0,cuda:1,cuda:2': 3 devices for 4 partitions");
    check_usage_error("train --data synthetic --pipeline 2 --devices cuda:0,tpu:1",
                      "'tpu:1' is not a device");
    // cuda:7 is absent here (no GPU, or fewer than 8): named before the run starts.
    const std::string out = (echelon::test::temp_dir("devices") / "run").string();
    check_usage_error("train --data synthetic --pipeline 2 --devices cuda:7,cuda:7 --out " + out,
                      "--devices cuda:7,cuda:7: cuda:7 is not present");
    CHECK_FALSE(std::filesystem::exists(out));
  }
}
