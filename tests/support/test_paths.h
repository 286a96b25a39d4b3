// Absolute paths for tests that name files without touching the disk (mem_env, parsers, expected
// error messages). "/etc/baton" is absolute on POSIX but only drive-relative on Windows, where the
// product rightly resolves it against the current drive; abs_path() gives the path the platform
// itself calls absolute, spelled natively, so expected messages match what the product prints.
#pragma once

#include <filesystem>

namespace baton::test {

// "/etc/baton" on POSIX; "C:\etc\baton" (the current drive) on Windows.
inline std::filesystem::path abs_path(const std::filesystem::path& posix_absolute) {
  return std::filesystem::absolute(posix_absolute).lexically_normal();
}

}  // namespace baton::test
