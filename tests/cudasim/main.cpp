// The emulator's self-test binary (cuda/sim): plain doctest main.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
