#include "os/env.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "support/test_paths.h"

namespace fs = std::filesystem;

namespace {
fs::path scratch_dir(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-env-test-" + name);
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

TEST_CASE("streaming atomic write appends every piece or leaves the old file", "[unit][env]") {
  auto& e = baton::env::default_env();
  const auto dir = scratch_dir("atomic-stream");
  const auto path = dir / "big.bin";
  REQUIRE(baton::write_file_atomic(e, path, "old"));
  REQUIRE(baton::write_file_atomic(e, path, [](baton::writable_file& f) -> baton::status {
    for (const char* p : {"one,", "two,", "three"}) {
      if (auto s = f.append(p); !s) return s;
    }
    return {};
  }));
  auto content = e.read_file(path);
  REQUIRE(content);
  CHECK(*content == "one,two,three");

  auto failed = baton::write_file_atomic(e, path, [](baton::writable_file& f) -> baton::status {
    if (auto s = f.append("half"); !s) return s;
    return baton::make_error("producer gave up");
  });
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error().message,
             Catch::Contains(path.string()) && Catch::Contains("producer gave up"));
  content = e.read_file(path);
  REQUIRE(content);
  CHECK(*content == "one,two,three");
  auto names = e.list_dir(dir);
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"big.bin"});
  fs::remove_all(dir);
}

TEST_CASE("posix readable file reads any range", "[unit][env]") {
  auto& e = baton::env::default_env();
  const auto dir = scratch_dir("readable");
  const auto path = dir / "f";
  REQUIRE(baton::write_file_atomic(e, path, "0123456789"));
  auto f = e.new_readable_file(path);
  REQUIRE(f);
  CHECK((*f)->size() == 10);
  std::string out;
  REQUIRE((*f)->read(3, 4, out));
  CHECK(out == "3456");
  REQUIRE((*f)->read(8, 5, out));
  CHECK(out == "89");
  REQUIRE((*f)->read(20, 5, out));
  CHECK(out.empty());
  auto missing = e.new_readable_file(dir / "nope");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("nope"));
  fs::remove_all(dir);
}
