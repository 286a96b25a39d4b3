#include "os/env.h"

#include <catch2/catch.hpp>
#include <filesystem>

namespace fs = std::filesystem;

namespace {
fs::path scratch_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("baton-env-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
}  // namespace

TEST_CASE("posix env writes atomically and reads back", "[unit][env]") {
  auto& e = baton::env::default_env();
  const auto dir = scratch_dir("atomic");
  const auto path = dir / "state.json";
  REQUIRE(baton::write_file_atomic(e, path, "first"));
  REQUIRE(baton::write_file_atomic(e, path, "second"));
  auto content = e.read_file(path);
  REQUIRE(content);
  CHECK(*content == "second");
  auto names = e.list_dir(dir);
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"state.json"});  // no temp file left behind
  fs::remove_all(dir);
}

TEST_CASE("posix env reports missing files by path", "[unit][env]") {
  auto& e = baton::env::default_env();
  auto r = e.read_file("/nonexistent/baton/file");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("/nonexistent/baton/file") != std::string::npos);
}

TEST_CASE("atomic write into a missing folder fails and names the path", "[unit][env]") {
  auto& e = baton::env::default_env();
  auto s = baton::write_file_atomic(e, "/nonexistent/baton/state.json", "x");
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("/nonexistent/baton/state.json") != std::string::npos);
}
