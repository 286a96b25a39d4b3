// The main of every Catch2 test executable: Catch's own, plus the skip status of
// tests/support/skip.h. A run that failed nothing but skipped something exits with
// skip_exit_code, so neither ctest nor a person running the executable reads it as a pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <iostream>

#include "support/skip.h"

namespace baton::test {

std::vector<std::pair<std::string, std::string>>& skipped_tests() {
  static std::vector<std::pair<std::string, std::string>> skipped;
  return skipped;
}

}  // namespace baton::test

int main(int argc, char* argv[]) {
  const int failures = Catch::Session().run(argc, argv);
  const auto& skipped = baton::test::skipped_tests();
  if (failures != 0 || skipped.empty()) return failures;
  for (const auto& [test, reason] : skipped) {
    std::cerr << "SKIPPED: " << test << ": " << reason << "\n";
  }
  return baton::test::skip_exit_code;
}
