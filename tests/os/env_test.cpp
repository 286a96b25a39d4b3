#include "os/env.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <span>

#include "support/test_paths.h"

namespace fs = std::filesystem;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace env_test {
fs::path scratch_dir(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-env-test-" + name);
}

TEST_CASE("posix env writes atomically and reads back", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("atomic");
  const auto path = dir / "state.json";
  REQUIRE(baton::os::write_file_atomic(e, path, "first"));
  REQUIRE(baton::os::write_file_atomic(e, path, "second"));
  auto content = e.read_file(path);
  REQUIRE(content);
  CHECK(*content == "second");
  auto names = e.list_dir(dir);
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"state.json"});  // no temp file left behind
  fs::remove_all(dir);
}

TEST_CASE("posix env reports missing files by path", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  auto r = e.read_file("/nonexistent/baton/file");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("/nonexistent/baton/file") != std::string::npos);
}

TEST_CASE("atomic write into a missing folder fails and names the path", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  auto s = baton::os::write_file_atomic(e, "/nonexistent/baton/state.json", "x");
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("/nonexistent/baton/state.json") != std::string::npos);
}

TEST_CASE("streaming atomic write appends every piece or leaves the old file", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("atomic-stream");
  const auto path = dir / "big.bin";
  REQUIRE(baton::os::write_file_atomic(e, path, "old"));
  REQUIRE(baton::os::write_file_atomic(e, path, [](baton::os::writable_file& f) -> baton::status {
    for (const char* p : {"one,", "two,", "three"}) {
      if (auto s = f.append(p); !s) return s;
    }
    return {};
  }));
  auto content = e.read_file(path);
  REQUIRE(content);
  CHECK(*content == "one,two,three");

  auto failed =
      baton::os::write_file_atomic(e, path, [](baton::os::writable_file& f) -> baton::status {
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

TEST_CASE("write_at patches bytes already written and appends carry on at the end",
          "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("write-at");
  const auto path = dir / "patched.bin";
  {
    auto f = e.new_writable_file(path);
    REQUIRE(f);
    REQUIRE((*f)->append("digest=0000;"));
    REQUIRE((*f)->append("body"));
    REQUIRE((*f)->write_at(7, "beef"));
    REQUIRE((*f)->append(";tail"));  // after "body", not after the patch
    auto past = (*f)->write_at(18, "xyzw");
    REQUIRE_FALSE(past);
    CHECK_THAT(past.error().message,
               Catch::Contains(path.filename().string()) && Catch::Contains("byte 18"));
    REQUIRE((*f)->sync());
    REQUIRE((*f)->close());
  }
  CHECK(e.read_file(path).value() == "digest=beef;body;tail");

  // Over a reused file that was longer: the patch lands inside this handle's bytes, and the old
  // tail is cut as before.
  {
    auto f = e.reuse_writable_file(path);
    REQUIRE(f);
    REQUIRE((*f)->append("id=00;x"));
    REQUIRE((*f)->write_at(3, "42"));
    CHECK_FALSE((*f)->write_at(6, "yz"));  // byte 7 was never written by this handle
    REQUIRE((*f)->truncate_to_written());
    REQUIRE((*f)->close());
  }
  CHECK(e.read_file(path).value() == "id=42;x");

  const auto log = dir / "appended.log";
  auto a = e.new_appendable_file(log);
  REQUIRE(a);
  REQUIRE((*a)->append("line\n"));
  auto refused = (*a)->write_at(0, "L");
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("appending"));
  REQUIRE((*a)->close());
  CHECK(e.read_file(log).value() == "line\n");
  fs::remove_all(dir);
}

TEST_CASE("posix readable file reads any range", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("readable");
  const auto path = dir / "f";
  REQUIRE(baton::os::write_file_atomic(e, path, "0123456789"));
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
  // Windows keeps a deleted file's name until its last handle closes, so the folder would not
  // be empty: close the reader first.
  f->reset();
  fs::remove_all(dir);
}

TEST_CASE("readable files read_into their caller's memory, and refuse to run past the end",
          "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("read-into");
  const auto path = dir / "f";
  REQUIRE(baton::os::write_file_atomic(e, path, "0123456789"));
  auto f = e.new_readable_file(path);
  REQUIRE(f);
  char buf[6] = {'x', 'x', 'x', 'x', 'x', 'x'};
  REQUIRE((*f)->read_into(2, std::span<char>(buf, 5)));
  CHECK(std::string(buf, 6) == "23456x");
  REQUIRE((*f)->read_into(10, std::span<char>()));  // nothing, at the very end
  const auto past = (*f)->read_into(7, std::span<char>(buf, 5));
  REQUIRE_FALSE(past);
  CHECK_THAT(past.error().message, Catch::Contains("ended at byte 10"));
  CHECK_THAT(past.error().message, Catch::Contains("f"));
  f->reset();
  fs::remove_all(dir);
}

// A file that implements read() alone, as a test double would: read_into falls back on it.
class read_only_file final : public baton::os::readable_file {
 public:
  explicit read_only_file(std::string data) : data_(std::move(data)) {}
  std::uint64_t size() const override { return data_.size(); }
  baton::status read(std::uint64_t offset, std::size_t n, std::string& out) override {
    ++reads;
    out = offset >= data_.size() ? std::string() : data_.substr(offset, n);
    return {};
  }
  int reads = 0;

 private:
  std::string data_;
};

TEST_CASE("read_into falls back on read() in bounded pieces", "[unit][env]") {
  std::string data(3 << 20, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 4096);
  read_only_file f(data);
  std::string out(data.size() - 5, '\0');
  REQUIRE(f.read_into(5, std::span<char>(out.data(), out.size())));
  CHECK(out == data.substr(5));
  CHECK(f.reads >= 3);  // never the whole range at once
  const auto past = f.read_into(data.size() - 2, std::span<char>(out.data(), 4));
  REQUIRE_FALSE(past);
  CHECK_THAT(past.error().message, Catch::Contains("ended at byte " + std::to_string(data.size())));
}

TEST_CASE("default env tells files, folders and missing entries apart without following",
          "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("stat");
  REQUIRE(baton::os::write_file_atomic(e, dir / "f", "12345"));
  REQUIRE(e.create_dirs(dir / "sub" / "deeper"));
  auto f = e.stat_no_follow(dir / "f");
  REQUIRE(f);
  CHECK(f->kind == baton::os::entry_kind::regular);
  CHECK(f->size == 5);
  auto d = e.stat_no_follow(dir / "sub");
  REQUIRE(d);
  CHECK(d->kind == baton::os::entry_kind::directory);
  auto m = e.stat_no_follow(dir / "nothing");
  REQUIRE(m);
  CHECK(m->kind == baton::os::entry_kind::missing);
  fs::remove_all(dir);
}

TEST_CASE("default env syncs a file by path and removes a folder tree", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("tree");
  REQUIRE(e.create_dirs(dir / "t" / "a" / "b"));
  REQUIRE(baton::os::write_file_atomic(e, dir / "t" / "a" / "b" / "x", "x"));
  REQUIRE(baton::os::write_file_atomic(e, dir / "t" / "y", "y"));
  CHECK(e.sync_file(dir / "t" / "y"));
  auto missing = e.sync_file(dir / "t" / "nope");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("nope"));
  // A folder renames like a file (a sealed checkpoint folder is moved into place this way).
  REQUIRE(e.rename_file(dir / "t", dir / "u"));
  CHECK(e.file_exists(dir / "u" / "a" / "b" / "x"));
  REQUIRE(e.remove_dir_all(dir / "u"));
  CHECK_FALSE(e.file_exists(dir / "u"));
  CHECK(e.remove_dir_all(dir / "u"));  // already gone: nothing to do
  fs::remove_all(dir);
}

TEST_CASE("remove_temp_files takes only the temp files of killed writes", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("temps");
  REQUIRE(baton::os::write_file_atomic(e, dir / "record.0.json", "{}"));
  REQUIRE(baton::os::write_file_atomic(e, dir / "record.0.json.tmp-0123456789abcdef-7", "half"));
  REQUIRE(baton::os::write_file_atomic(e, dir / "spec.json.tmp-py42", "half"));
  REQUIRE(e.create_dirs(dir / "kept.tmp-folder"));  // a folder is never ours to remove
  auto n = baton::os::remove_temp_files(e, dir);
  REQUIRE(n);
  CHECK(*n == 2);
  CHECK(e.file_exists(dir / "record.0.json"));
  CHECK_FALSE(e.file_exists(dir / "record.0.json.tmp-0123456789abcdef-7"));
  CHECK_FALSE(e.file_exists(dir / "spec.json.tmp-py42"));
  CHECK(e.file_exists(dir / "kept.tmp-folder"));
  auto none = baton::os::remove_temp_files(e, dir / "missing");
  REQUIRE(none);
  CHECK(*none == 0);
  fs::remove_all(dir);
}

}  // namespace env_test
