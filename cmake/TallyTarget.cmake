# Shared compile settings, applied per target (never globally).
function(tally_compile_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  # GCC 12 false positives on std::variant and string concatenation.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-restrict)
  endif()
  if(TALLY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # A fuzz build is a sanitizer build too: libFuzzer finds little without
  # ASan and UBSan, and every test of the tree must link their runtimes.
  if(TALLY_SANITIZE OR TALLY_FUZZ)
    # -fno-sanitize-recover: the first finding aborts the process, so a test
    # cannot pass with a report buried in its output.
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(TALLY_FUZZ)
    # Coverage for libFuzzer in every library a fuzz target links.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

# tally_library(<module> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Defines tally_<module> with alias tally::<module>, PUBLIC include, PRIVATE src.
function(tally_library module)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(tally_${module} STATIC ${ARG_SOURCES})
  add_library(tally::${module} ALIAS tally_${module})
  target_include_directories(tally_${module} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                             PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(tally_${module} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  tally_compile_options(tally_${module})
  tally_code_precompiled_headers(tally_${module})
endfunction()

# tally_code_pch_target(): tally_code_pch, the one precompiled header of the
# libraries and of the binaries (the standard headers most files include,
# and fmt), parsed once per build instead of once per file: 0.4-0.9 s of
# CPU a file. Its users compile with the same options
# (tally_compile_options); their extra -D definitions do not touch those
# headers. Call once fmt is found, before the modules.
set(TALLY_CODE_PCH_HEADERS
    <algorithm> <atomic> <chrono> <condition_variable> <cstdint> <cstring> <deque> <filesystem>
    <functional> <map> <memory> <mutex> <optional> <set> <span> <string> <string_view> <thread>
    <unordered_map> <utility> <vector> <fmt/core.h> <fmt/format.h>)
function(tally_code_pch_target)
  set(src ${CMAKE_BINARY_DIR}/tally_code_pch.cc)
  if(NOT EXISTS ${src})
    file(WRITE ${src} "// The precompiled header's own translation unit (cmake/TallyTarget.cmake).\n")
  endif()
  add_library(tally_code_pch OBJECT ${src})
  target_link_libraries(tally_code_pch PRIVATE fmt::fmt Threads::Threads)
  tally_compile_options(tally_code_pch)
  tally_pch_options(tally_code_pch)
  target_precompile_headers(tally_code_pch PRIVATE ${TALLY_CODE_PCH_HEADERS})
endfunction()

# tally_code_precompiled_headers(<target>): a library or binary of tally's
# own code reuses tally_code_pch's header (after tally_compile_options).
function(tally_code_precompiled_headers target)
  target_precompile_headers(${target} REUSE_FROM tally_code_pch)
  tally_pch_options(${target})
endfunction()

# tally_pch_options(<target>): what compiling with a precompiled header
# needs. clang: no timestamp in it, so ccache can cache what includes it.
# GCC 12: libstdc++ inlined from a precompiled header is not treated as a
# system header, and two of its known false positives (std::string's
# memcpy bounds) then fire in every file; the sanitizer tree (clang, ASan)
# checks the real thing.
function(tally_pch_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Xclang -fno-pch-timestamp)
  elseif(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-array-bounds -Wno-stringop-overflow)
  endif()
endfunction()

# tally_test_code_options(<target>): how a test's own code is compiled
# (assertions, fixtures, reference models, clients: not what a test
# measures, and the libraries it drives keep the build's level): -O0, in
# both trees, about two thirds of the compile time of -O1 and half of -O3.
function(tally_test_code_options target)
  tally_compile_options(${target})
  target_compile_options(${target} PRIVATE -O0)
  tally_pch_options(${target})
endfunction()

# tally_test_pch_target(): tally_test_pch, the one precompiled header of
# every test executable (GoogleTest and the standard headers the tests
# share), parsed once per build instead of once per test file. Its users
# compile with the same options (tally_test_code_options); their extra -D
# definitions do not touch those headers. Call once GoogleTest is found.
set(TALLY_TEST_PCH_HEADERS
    <gtest/gtest.h> <algorithm> <atomic> <chrono> <cstdint> <cstdio> <filesystem> <fstream>
    <functional> <map> <memory> <mutex> <optional> <random> <set> <string> <string_view>
    <thread> <utility> <vector>)
function(tally_test_pch_target)
  set(src ${CMAKE_BINARY_DIR}/tally_test_pch.cc)
  if(NOT EXISTS ${src})
    file(WRITE ${src} "// The precompiled header's own translation unit (cmake/TallyTarget.cmake).\n")
  endif()
  add_library(tally_test_pch OBJECT ${src})
  target_link_libraries(tally_test_pch PRIVATE GTest::gtest fmt::fmt Threads::Threads)
  tally_test_code_options(tally_test_pch)
  target_precompile_headers(tally_test_pch PRIVATE ${TALLY_TEST_PCH_HEADERS})
endfunction()

# tally_test_precompiled_headers(<target>): a test executable reuses
# tally_test_pch's header (after tally_test_code_options).
function(tally_test_precompiled_headers target)
  target_precompile_headers(${target} REUSE_FROM tally_test_pch)
endfunction()

# tally_test(<name> SOURCES ... DEPS ... [LABELS ...])
# A GoogleTest executable registered with ctest through gtest_discover_tests.
function(tally_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  tally_test_code_options(${name})
  tally_test_precompiled_headers(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${labels}")
endfunction()

# tally_fuzz_target(<name> SOURCES ... DEPS ... CORPUS <dir>)
# A fuzz target (LLVMFuzzerTestOneInput). Normally it is built with a small
# driver and a ctest replays the checked-in corpus, so every input that once
# crashed stays a test. With -DTALLY_FUZZ=ON (clang) it links libFuzzer and
# the ctest fuzzes for TALLY_FUZZ_SECONDS from that corpus.
function(tally_fuzz_target name)
  cmake_parse_arguments(ARG "" "CORPUS" "SOURCES;DEPS" ${ARGN})
  if(TALLY_FUZZ)
    add_executable(${name} ${ARG_SOURCES})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    # New inputs go to the first directory (the build's own corpus); the
    # checked-in corpus is read, never written. A crashing input is written
    # to fuzz-crashes/<name>/ in the build directory, to be copied into the
    # checked-in corpus, where the replay test of the normal build keeps it.
    set(work ${CMAKE_CURRENT_BINARY_DIR}/${name}-corpus)
    set(crashes ${CMAKE_BINARY_DIR}/fuzz-crashes/${name})
    file(MAKE_DIRECTORY ${work} ${crashes})
    add_test(NAME ${name} COMMAND ${name} -max_total_time=${TALLY_FUZZ_SECONDS} -seed=${TALLY_FUZZ_SEED}
             -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=${crashes}/
             ${work} ${ARG_CORPUS})
  else()
    add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/base/fuzz/fuzz_main.cc)
    add_test(NAME ${name} COMMAND ${name} ${ARG_CORPUS})
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  tally_compile_options(${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;fuzz" TIMEOUT 600)
endfunction()
