#include "os/private_file.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/private_file_checks.h"

namespace fs = std::filesystem;

namespace {

// One folder per test case: ctest runs the cases of this file in parallel, and a shared folder
// emptied by one case under the other's feet failed the rename now and then.
fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("baton-private-file-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a private file is written whole and readable only by its owner and admins",
          "[unit][private_file]") {
  const auto dir = scratch("whole");
  const auto file = dir / "secret.json";
  REQUIRE(baton::os::write_private_file(file, "first\n", std::nullopt));
  CHECK(read(file) == "first\n");
  // Replacing keeps the protection and leaves no temporary file behind.
  REQUIRE(baton::os::write_private_file(file, "second\n", std::nullopt));
  CHECK(read(file) == "second\n");
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);

  baton::test::check_private_file_access(file);
  fs::remove_all(dir);
}

TEST_CASE("private file errors name the group or the path", "[unit][private_file]") {
  const auto dir = scratch("errors");
  auto no_group = baton::os::write_private_file(dir / "a", "x", std::string("baton-no-such-group"));
  REQUIRE_FALSE(no_group);
  CHECK_THAT(no_group.error().message, Catch::Contains("baton-no-such-group"));
  CHECK_FALSE(fs::exists(dir / "a"));
  auto no_folder = baton::os::write_private_file(dir / "missing" / "b", "x", std::nullopt);
  REQUIRE_FALSE(no_folder);
  CHECK_THAT(no_folder.error().message, Catch::Contains("missing"));
  auto not_there = baton::os::describe_file_access(dir / "nothing");
  CHECK_FALSE(not_there);
  fs::remove_all(dir);
}
