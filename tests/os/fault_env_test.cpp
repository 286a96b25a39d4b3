#include "os/fault_env.h"

#include <catch2/catch.hpp>

#include "os/mem_env.h"

using baton::os::fault_env;
using op = baton::os::fault_env::op;

namespace {
// open, append, sync, close, rename, sync_dir: six counted operations per atomic write.
constexpr int ops_per_atomic_write = 6;
}  // namespace

TEST_CASE("fault_env counts every mutating operation", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  REQUIRE(e.create_dirs("/d"));
  REQUIRE(baton::os::write_file_atomic(e, "/d/f", "data"));
  CHECK(e.op_count() == ops_per_atomic_write);
  CHECK(e.op_count(op::new_writable_file) == 1);
  CHECK(e.op_count(op::append) == 1);
  CHECK(e.op_count(op::sync) == 1);
  CHECK(e.op_count(op::close) == 1);
  CHECK(e.op_count(op::rename_file) == 1);
  CHECK(e.op_count(op::sync_dir) == 1);
  REQUIRE(e.read_file("/d/f"));  // reads are not counted
  REQUIRE(e.list_dir("/d"));
  REQUIRE(e.remove_file("/d/f"));
  CHECK(e.op_count(op::remove_file) == 1);
  CHECK(e.op_count() == ops_per_atomic_write + 1);
}

TEST_CASE("fault_env fails the Nth operation once", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  REQUIRE(e.create_dirs("/d"));
  e.fail_at(2, "No space left on device");  // the append
  auto s = baton::os::write_file_atomic(e, "/d/f", "data");
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message,
             Catch::Contains("write /d/f.tmp-") && Catch::Contains("No space left on device"));
  CHECK(e.faults_fired() == 1);
  CHECK(mem.files().empty());  // os::write_file_atomic removed its temp file
  REQUIRE(baton::os::write_file_atomic(e, "/d/f", "data"));  // once only
  CHECK(mem.read_file("/d/f").value() == "data");
}

TEST_CASE("fault_env fails persistently from the Nth operation on", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  REQUIRE(e.create_dirs("/d"));
  e.fail_at(2, "Input/output error", /*persistent=*/true, op::sync);
  REQUIRE(baton::os::write_file_atomic(e, "/d/a", "1"));  // first sync passes
  CHECK_FALSE(baton::os::write_file_atomic(e, "/d/b", "2"));
  CHECK_FALSE(baton::os::write_file_atomic(e, "/d/c", "3"));
  CHECK(e.faults_fired() == 2);
  e.disarm();
  CHECK(baton::os::write_file_atomic(e, "/d/c", "3"));
}

TEST_CASE("fault_env append can write half and throw", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  e.throw_half_append_at(2);
  auto f = e.new_writable_file("/f");
  REQUIRE(f);
  REQUIRE((*f)->append("abcd"));
  CHECK_THROWS_AS((*f)->append("123456"), fault_env::injected_exception);
  CHECK(mem.read_file("/f").value() == "abcd123");
}

TEST_CASE("fault_env counts and fails write_at as a write", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  auto f = e.new_writable_file("/f");
  REQUIRE(f);
  REQUIRE((*f)->append("abcd"));
  REQUIRE((*f)->write_at(1, "B"));
  CHECK(e.op_count(op::append) == 2);
  e.fail_at(1, "Input/output error");  // counted from arming: the next write
  auto s = (*f)->write_at(2, "C");
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("Input/output error"));
  CHECK(mem.read_file("/f").value() == "aBcd");  // the failed write left the bytes
}

TEST_CASE("fault_env calls back at the Nth operation", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  REQUIRE(e.create_dirs("/d"));
  std::vector<std::string> seen;
  e.call_at(
      1,
      [&](op o, const std::filesystem::path& p) {
        seen.push_back(std::string(fault_env::to_string(o)) + " " + p.string());
      },
      op::rename_file);
  REQUIRE(baton::os::write_file_atomic(e, "/d/f", "x"));  // a callback that returns lets it proceed
  REQUIRE(seen.size() == 1);
  CHECK_THAT(seen[0], Catch::StartsWith("rename /d/f.tmp-"));

  // A throwing callback is a crash at that point: everything before it happened, nothing after.
  for (int n = 1; n <= ops_per_atomic_write; ++n) {
    INFO("crash at operation " << n);
    baton::os::mem_env m2;
    fault_env e2(m2);
    REQUIRE(e2.create_dirs("/d"));
    REQUIRE(m2.put("/d/f", "old"));
    struct crash {};
    e2.call_at(n, [](op, const std::filesystem::path&) { throw crash{}; });
    CHECK_THROWS_AS(baton::os::write_file_atomic(e2, "/d/f", "new"), crash);
    const auto content = m2.read_file("/d/f").value();
    CHECK((content == "old" || content == "new"));  // never a mix
    CHECK(content == (n <= 5 ? "old" : "new"));     // the rename is operation 5
  }
}

TEST_CASE("fault_env passes errors of the wrapped env through", "[unit][fault_env]") {
  baton::os::mem_env mem;
  fault_env e(mem);
  auto r = e.new_writable_file("/missing/f");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("No such file or directory"));
  CHECK(e.op_count() == 1);
}

TEST_CASE("fault_env fails folder removal and file sync like remove and fsync",
          "[unit][fault_env]") {
  baton::os::mem_env base;
  fault_env e(base);
  REQUIRE(base.create_dirs("/d/sub"));
  REQUIRE(base.put("/d/sub/f", "x"));
  CHECK(e.stat_no_follow("/d/sub/f")->kind == baton::os::entry_kind::regular);  // uncounted read
  CHECK(e.op_count() == 0);
  e.fail_at(1, "disk gone", false, op::sync);
  auto s = e.sync_file("/d/sub/f");
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "fsync /d/sub/f: disk gone");
  CHECK(e.sync_file("/d/sub/f"));
  e.fail_at(1, "busy", false, op::remove_file);
  CHECK_FALSE(e.remove_dir_all("/d"));
  CHECK(base.file_exists("/d/sub/f"));
  CHECK(e.remove_dir_all("/d"));
  CHECK_FALSE(base.file_exists("/d/sub/f"));
  CHECK(e.op_count(op::remove_file) == 2);
  CHECK(e.op_count(op::sync) == 2);
}
