// The CUDA layer's environment switches (cuda/switches.h): each one's default, its accepted
// values and the message a bad value gets; the first launch's check of all of them. The kernels
// read their switch once per process, so these call the parsers they read through.
#include <doctest/doctest.h>

#include <iterator>
#include <optional>
#include <string>

#include <echelon/base/error.h>
#include <echelon/cuda/check.h>
#include <echelon/cuda/switches.h>

#include "tests/support/env_scope.h"

using namespace echelon;
using test::EnvScope;
using test::error_of;

namespace {

const char* const kSwitches[] = {"ECHELON_SYNC_LAUNCHES",     "ECHELON_FMA_CORE",
                                 "ECHELON_MMA_TILE",          "ECHELON_MMA_STAGES",
                                 "ECHELON_MMA_ASYNC_K",       "ECHELON_CONV_GATHER_TABLE",
                                 "ECHELON_CONV_ASYNC_GATHER", "ECHELON_CONV_WGRAD_FILL",
                                 "ECHELON_CONV_WGRAD_GROUPS", "ECHELON_AUTOTUNE"};

}  // namespace

TEST_SUITE("switches_gpu") {
  TEST_CASE("unset: every switch has its documented default") {
    std::optional<EnvScope> unset[std::size(kSwitches)];
    for (size_t i = 0; i < std::size(kSwitches); ++i) unset[i].emplace(kSwitches[i], std::nullopt);
    CHECK_FALSE(cuda::switches::sync_launches());
    CHECK(cuda::switches::fma_warp_tiles());
    CHECK(cuda::switches::mma_tile() == cuda::MmaTile::Auto);
    CHECK(cuda::switches::mma_stages() == 2);
    CHECK_FALSE(cuda::switches::mma_async_k());
    CHECK(cuda::switches::conv_gather_table());
    CHECK_FALSE(cuda::switches::conv_async_gather());
    CHECK(cuda::switches::conv_wgrad_fill() == 0);
    CHECK(cuda::switches::conv_wgrad_groups() == 0);
    CHECK_FALSE(cuda::switches::conv_autotune());
    CHECK_NOTHROW(cuda::switches::check_all());
  }

  TEST_CASE("the documented values select what they name") {
    {
      EnvScope old("ECHELON_FMA_CORE", "old");
      CHECK_FALSE(cuda::switches::fma_warp_tiles());
    }
    {
      EnvScope small("ECHELON_MMA_TILE", "64");
      CHECK(cuda::switches::mma_tile() == cuda::MmaTile::Small);
    }
    {
      EnvScope large("ECHELON_MMA_TILE", "128");
      CHECK(cuda::switches::mma_tile() == cuda::MmaTile::Large);
    }
    {
      EnvScope deep("ECHELON_MMA_STAGES", "4");
      CHECK(cuda::switches::mma_stages() == 4);
    }
    {
      EnvScope on("ECHELON_MMA_ASYNC_K", "1");
      CHECK(cuda::switches::mma_async_k());
    }
    {
      EnvScope off("ECHELON_CONV_GATHER_TABLE", "0");
      CHECK_FALSE(cuda::switches::conv_gather_table());
    }
    {
      EnvScope on("ECHELON_CONV_ASYNC_GATHER", "1");
      CHECK(cuda::switches::conv_async_gather());
    }
    {
      EnvScope fill("ECHELON_CONV_WGRAD_FILL", "512"), groups("ECHELON_CONV_WGRAD_GROUPS", "8");
      CHECK(cuda::switches::conv_wgrad_fill() == 512);
      CHECK(cuda::switches::conv_wgrad_groups() == 8);
    }
    EnvScope tune("ECHELON_AUTOTUNE", "1");
    CHECK(cuda::switches::conv_autotune());
  }

  TEST_CASE("a bad value is refused, naming the variable, the value and what is accepted") {
    {
      EnvScope stages("ECHELON_MMA_STAGES", "3");
      CHECK(error_of(cuda::switches::mma_stages) == "ECHELON_MMA_STAGES='3': expected 2 or 4");
    }
    {
      EnvScope tile("ECHELON_MMA_TILE", "256");
      CHECK(error_of(cuda::switches::mma_tile) ==
            "ECHELON_MMA_TILE='256': expected auto, 64 or 128");
    }
    {
      EnvScope core("ECHELON_FMA_CORE", "older");
      CHECK(error_of(cuda::switches::fma_warp_tiles) ==
            "ECHELON_FMA_CORE='older': expected warp, new or old");
    }
    {
      EnvScope tune("ECHELON_AUTOTUNE", "yes please");
      CHECK(error_of(cuda::switches::conv_autotune).rfind("ECHELON_AUTOTUNE='yes please': ", 0) ==
            0);
    }
    {
      EnvScope gather("ECHELON_CONV_ASYNC_GATHER", "2");
      CHECK(error_of(cuda::switches::conv_async_gather) ==
            "ECHELON_CONV_ASYNC_GATHER='2': expected 1, 0, true, false, on, off, yes or no");
    }
    {
      EnvScope fill("ECHELON_CONV_WGRAD_FILL", "12x");
      CHECK(error_of(cuda::switches::conv_wgrad_fill) ==
            "ECHELON_CONV_WGRAD_FILL='12x': expected an integer in [0, 16777216]");
    }
    EnvScope groups("ECHELON_CONV_WGRAD_GROUPS", "70000");
    CHECK(error_of(cuda::switches::conv_wgrad_groups) ==
          "ECHELON_CONV_WGRAD_GROUPS='70000': expected an integer in [0, 65535]");
  }

  TEST_CASE("the first launch's check refuses a bad switch the run may never read") {
    EnvScope sync("ECHELON_SYNC_LAUNCHES", std::nullopt);
    {
      EnvScope async_k("ECHELON_MMA_ASYNC_K", "y");
      CHECK(error_of(cuda::read_launch_environment) ==
            "ECHELON_MMA_ASYNC_K='y': expected 1, 0, true, false, on, off, yes or no");
    }
    CHECK_FALSE(cuda::read_launch_environment());
    EnvScope on("ECHELON_SYNC_LAUNCHES", "on");
    CHECK(cuda::read_launch_environment());
  }
}
