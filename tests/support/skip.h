// Catch2 v2 has no skip, and a test that returns early on a missing precondition passes without
// testing anything. BATON_SKIP(reason) is for preconditions no set-up can provide (running as
// root): it warns and returns, and the test executable then exits with skip_exit_code instead of
// 0 (tests/catch_main.cpp), which ctest reports as "Skipped" through SKIP_RETURN_CODE
// (tests/CMakeLists.txt), never as passed. Anything scripts/setup.sh can install is no reason to
// skip: a test missing a package fails.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

namespace baton::test {

// automake's "skipped" status; ctest is told the same number.
inline constexpr int skip_exit_code = 77;

// Test case name and reason of each skip in this run (defined in tests/catch_main.cpp).
std::vector<std::pair<std::string, std::string>>& skipped_tests();

}  // namespace baton::test

#define BATON_SKIP(reason)                                           \
  do {                                                               \
    WARN("skipped: " << (reason));                                   \
    ::baton::test::skipped_tests().emplace_back(                  \
        ::Catch::getResultCapture().getCurrentTestName(), (reason)); \
    return;                                                          \
  } while (false)
