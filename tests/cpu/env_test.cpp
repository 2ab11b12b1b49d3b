// The checked environment readers (base/env.h) and switches that go through them: every kind,
// its default, and the message a bad value gets.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include <echelon/base/env.h>
#include <echelon/base/error.h>
#include <echelon/parallel/rendezvous.h>

#include "tests/support/cli_run.h"
#include "tests/support/env_scope.h"

namespace echelon {
namespace {

using test::EnvScope;
using test::error_of;

constexpr const char* kVar = "ECHELON_ENV_TEST_SWITCH";

enum class Tile { Auto, Small, Large };

Tile read_tile() {
  return env::choice<Tile>(kVar, Tile::Auto,
                           {{"auto", Tile::Auto}, {"64", Tile::Small}, {"128", Tile::Large}});
}

}  // namespace

TEST_SUITE("env") {
  TEST_CASE("flag: every spelling in any case; unset or empty is the default") {
    for (const char* on : {"1", "true", "on", "yes", "TRUE", "On", "YES"}) {
      EnvScope scope(kVar, on);
      CHECK_MESSAGE(env::flag(kVar, false), on);
    }
    for (const char* off : {"0", "false", "off", "no", "False", "OFF", "No"}) {
      EnvScope scope(kVar, off);
      CHECK_FALSE_MESSAGE(env::flag(kVar, true), off);
    }
    {
      EnvScope unset(kVar, std::nullopt);
      CHECK(env::flag(kVar, true));
      CHECK_FALSE(env::flag(kVar, false));
    }
    EnvScope empty(kVar, "");
    CHECK(env::flag(kVar, true));
    CHECK_FALSE(env::flag(kVar, false));
  }

  TEST_CASE("flag: anything else is refused, naming the variable, the value and the spellings") {
    for (const char* bad : {"2", "y", "enable", " 1", "1 ", "onn"}) {
      EnvScope scope(kVar, bad);
      CHECK_THROWS_AS(env::flag(kVar, false), Error);
    }
    EnvScope scope(kVar, "maybe");
    CHECK(error_of([] { env::flag(kVar, true); }) ==
          "ECHELON_ENV_TEST_SWITCH='maybe': expected 1, 0, true, false, on, off, yes or no");
    CHECK(error_of([] { env::parse_flag("ECHELON_X", "2"); }).rfind("ECHELON_X='2': expected", 0) ==
          0);
  }

  TEST_CASE("integer: the whole value, within the bounds") {
    {
      EnvScope scope(kVar, "12");
      CHECK(env::integer(kVar, 5, 0, 100) == 12);
    }
    {
      EnvScope scope(kVar, "-3");
      CHECK(env::integer(kVar, 5, -10, 10) == -3);
    }
    {
      EnvScope scope(kVar, "0");
      CHECK(env::integer(kVar, 5, 0, 100) == 0);
    }
    {
      EnvScope scope(kVar, "100");  // the bounds are inclusive
      CHECK(env::integer(kVar, 5, 0, 100) == 100);
    }
    {
      EnvScope unset(kVar, std::nullopt);
      CHECK(env::integer(kVar, 5, 0, 100) == 5);
    }
    EnvScope empty(kVar, "");
    CHECK(env::integer(kVar, 5, 0, 100) == 5);
  }

  TEST_CASE("integer: trailing text, blanks, signs, overflow and out-of-range values are refused") {
    for (const char* bad : {"12x", "abc", " 4", "4 ", "+4", "1e3", "0x10", "3.0", "--1",
                            "99999999999999999999", "101", "-1"}) {
      EnvScope scope(kVar, bad);
      CHECK_THROWS_AS_MESSAGE(env::integer(kVar, 5, 0, 100), Error, bad);
    }
    EnvScope scope(kVar, "12x");
    CHECK(error_of([] { env::integer(kVar, 5, 1, 64); }) ==
          "ECHELON_ENV_TEST_SWITCH='12x': expected an integer in [1, 64]");
    CHECK(env::parse_integer("X", "7", 7, 7) == 7);
    CHECK(error_of([] { env::parse_integer("X", "", 0, 1); }) ==
          "X='': expected an integer in [0, 1]");
  }

  TEST_CASE("choice: a name in any case; unset or empty is the default") {
    {
      EnvScope unset(kVar, std::nullopt);
      CHECK(read_tile() == Tile::Auto);
    }
    {
      EnvScope empty(kVar, "");
      CHECK(read_tile() == Tile::Auto);
    }
    {
      EnvScope scope(kVar, "128");
      CHECK(read_tile() == Tile::Large);
    }
    {
      EnvScope scope(kVar, "64");
      CHECK(read_tile() == Tile::Small);
    }
    EnvScope scope(kVar, "AUTO");
    CHECK(read_tile() == Tile::Auto);
  }

  TEST_CASE("choice: another value is refused with the names in their order") {
    EnvScope scope(kVar, "256");
    CHECK(error_of(read_tile) == "ECHELON_ENV_TEST_SWITCH='256': expected auto, 64 or 128");
    CHECK(error_of([] {
            env::parse_choice<int>("ECHELON_MMA_STAGES", "3", {{"2", 2}, {"4", 4}});
          }) == "ECHELON_MMA_STAGES='3': expected 2 or 4");
    CHECK(error_of([] {
            env::parse_choice<int>("ONE", "x", {{"only", 1}});
          }) == "ONE='x': expected only");
  }

  TEST_CASE("the rendezvous variables are refused by name, as env reads them") {
    EnvScope rank("RANK", "0"), world("WORLD_SIZE", "2"), local("LOCAL_RANK", std::nullopt),
        addr("MASTER_ADDR", "127.0.0.1"), port("MASTER_PORT", "70000"),
        own("ECHELON_RENDEZVOUS_PORT", std::nullopt), timeout("ECHELON_RENDEZVOUS_TIMEOUT", "5");
    CHECK(error_of(parallel::rendezvous_environment) ==
          "MASTER_PORT='70000': expected an integer in [1, 65535]");
    {
      EnvScope bad_world("WORLD_SIZE", "two");
      CHECK(error_of(parallel::rendezvous_environment) ==
            "WORLD_SIZE='two': expected an integer in [1, 16777216]");
    }
    EnvScope good_port("MASTER_PORT", "29500");
    {
      EnvScope bad_own("ECHELON_RENDEZVOUS_PORT", "29501x");
      CHECK(error_of(parallel::rendezvous_environment) ==
            "ECHELON_RENDEZVOUS_PORT='29501x': expected an integer in [1, 65535]");
    }
    const std::optional<parallel::RendezvousEnvironment> env = parallel::rendezvous_environment();
    REQUIRE(env.has_value());
    CHECK(env->world_size == 2);
    CHECK(env->master_port == 29500);
    // One of RANK and WORLD_SIZE without the other would train alone, silently.
    {
      EnvScope no_world("WORLD_SIZE", std::nullopt);
      CHECK(error_of(parallel::rendezvous_environment) ==
            "rendezvous: RANK=0 is set but WORLD_SIZE is not; set both (as torchrun does) or "
            "neither");
    }
    {
      EnvScope no_rank("RANK", std::nullopt);
      CHECK(error_of(parallel::rendezvous_environment) ==
            "rendezvous: WORLD_SIZE=2 is set but RANK is not; set both (as torchrun does) or "
            "neither");
      EnvScope one("WORLD_SIZE", "1");
      CHECK_FALSE(parallel::rendezvous_environment().has_value());
    }
  }

  TEST_CASE("the CLI reports a bad ECHELON_CPU_CACHE_MB as one error line, exit 2") {
    const test::Run r = test::run("bench op relu --input 4,4 --repeats 1 --warmup 0 --device cpu",
                                  "ECHELON_CPU_CACHE_MB=abc ");
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err ==
                      "echelon: error: ECHELON_CPU_CACHE_MB='abc': expected an integer in [0, "
                      "16777216]\n",
                  r.err);
  }
}

}  // namespace echelon
