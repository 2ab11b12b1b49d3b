# Fuzzing (tests/fuzz, docs/fuzzing.md). ECHELON_FUZZ=ON (clang only) builds one libFuzzer binary
# per parser, fuzz_<target>. The parsers' own sources (the list below) get libFuzzer's coverage
# instrumentation; everything else is built as in the sanitizer build, so the fuzz targets can
# share a build folder (and ccache) with the AddressSanitizer + UBSan build of the tests.
# ECHELON_FUZZ_COVERAGE=ON (clang) instead compiles those sources with llvm source-based coverage
# (-fprofile-instr-generate -fcoverage-mapping) for `tools/fuzz.sh --coverage`.
option(ECHELON_FUZZ "Build the libFuzzer targets in tests/fuzz (clang; implies address,undefined)" OFF)
option(ECHELON_FUZZ_COVERAGE "Instrument the parsers for llvm-cov line coverage (clang)" OFF)

# The sources holding the parsers the fuzz targets exercise (which functions of them are "the
# parser" of each target, for the coverage in docs/fuzzing.md: tests/fuzz/parsers.txt).
set(ECHELON_PARSER_SOURCES
  base/env.cpp
  base/json.cpp
  data/io.cpp
  data/datasets.cpp
  data/image_codec.cpp
  data/jpeg_decode.cpp
  data/loader.cpp
  tensor/safetensors.cpp
  tensor/device.cpp
  tensor/dtype.cpp
  parallel/partition.cpp
  parallel/schedule.cpp
  parallel/op_bench.cpp
  app/checkpoint.cpp
  app/metrics.cpp
  app/options.cpp
  app/cli/command.cpp
  app/cli/bench_cmd.cpp)

if(ECHELON_FUZZ OR ECHELON_FUZZ_COVERAGE)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ECHELON_FUZZ / ECHELON_FUZZ_COVERAGE need clang (CXX=clang++-14)")
  endif()
endif()
if(ECHELON_FUZZ)
  if(NOT ECHELON_SANITIZE)
    set(ECHELON_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
  # -O1 on the parsers: the shared sanitizer build is Debug (-O0), several times slower to fuzz.
  set(echelon_parser_flags -fsanitize=fuzzer-no-link -O1)
elseif(ECHELON_FUZZ_COVERAGE)
  set(echelon_parser_flags -fprofile-instr-generate -fcoverage-mapping)
endif()

# Called after the layers exist (the sources belong to targets of the top directory).
function(echelon_instrument_parsers)
  if(NOT echelon_parser_flags)
    return()
  endif()
  if(ECHELON_FUZZ_COVERAGE)
    # Every program linking the instrumented parsers needs the profile runtime.
    target_link_options(echelon_base PUBLIC -fprofile-instr-generate)
  endif()
  foreach(source IN LISTS ECHELON_PARSER_SOURCES)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/${source} DIRECTORY ${PROJECT_SOURCE_DIR}
                 ${PROJECT_SOURCE_DIR}/app/cli APPEND PROPERTY COMPILE_OPTIONS ${echelon_parser_flags})
  endforeach()
endfunction()
