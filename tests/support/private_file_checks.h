// Test helper: checks that a file written by os::write_private_file is readable only by whom it
// should be. POSIX: mode 0600. Windows: a protected DACL of SYSTEM, Administrators and our user,
// nobody else. wine stores no DACL (it maps one onto Unix mode bits and rebuilds a DACL when
// asked), so under wine only what survives that mapping is checked: SYSTEM and nobody else.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "os/private_file.h"
#include "os/wine.h"

namespace baton::test {

inline void check_private_file_access(const std::filesystem::path& file) {
  auto access = os::describe_file_access(file);
  REQUIRE(access);
  const std::string& a = *access;
  INFO("access of " << file.string() << ": " << a);
#ifdef _WIN32
  CHECK_THAT(a, Catch::Contains("(A;;FA;;;SY)"));
  CHECK_THAT(a, !Catch::Contains(";;;WD)") && !Catch::Contains(";;;BU)") &&
                    !Catch::Contains(";;;AU)") && !Catch::Contains("ID;"));
  if (os::running_under_wine()) {
    WARN("wine: DACL rebuilt from Unix mode bits; protection and Administrators not checked");
    return;
  }
  CHECK(a.rfind("D:P", 0) == 0);
  CHECK_THAT(a, Catch::Contains("(A;;FA;;;BA)"));
#else
  CHECK(a == "mode 0600");
#endif
}

}  // namespace baton::test
