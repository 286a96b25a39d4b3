// Absolute paths for tests that name files without touching the disk (os::mem_env, parsers,
// expected error messages). "/etc/baton" is absolute on POSIX but only drive-relative on Windows,
// where the product rightly resolves it against the current drive; abs_path() gives the path the
// platform itself calls absolute, spelled natively, so expected messages match what the product
// prints.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace baton::test {

// "/etc/baton" on POSIX; "C:\etc\baton" (the current drive) on Windows.
inline std::filesystem::path abs_path(const std::filesystem::path& posix_absolute) {
  return std::filesystem::absolute(posix_absolute).lexically_normal();
}

// An empty folder `name` under the temp directory, emptied first: a failed run's files stay for
// inspection until the next run. Each test file prefixes its names so parallel tests never share.
inline std::filesystem::path fresh_scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole file as text; empty when it cannot be read (the test's checks then say what is
// missing).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Debian's python3, which has the packages scripts/setup.sh installs (python3-torch, -numpy,
// -xxhash); the one first on PATH may be a build without them. "python3" where there is none.
inline std::string python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

}  // namespace baton::test
