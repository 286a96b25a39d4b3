#include "os/mem_env.h"

#include <catch2/catch.hpp>
#include <span>
#include <thread>

#include "support/test_paths.h"

using baton::os::mem_env;

TEST_CASE("mem_env writes, reads, renames and removes", "[unit][mem_env]") {
  mem_env e;
  REQUIRE(e.create_dirs("/a/b"));
  CHECK(e.file_exists("/a"));
  CHECK(e.file_exists("/a/b"));
  auto f = e.new_writable_file("/a/b/x");
  REQUIRE(f);
  CHECK(e.file_exists("/a/b/x"));  // created at open, like O_CREAT
  REQUIRE((*f)->append("hello "));
  REQUIRE((*f)->append("world"));
  REQUIRE((*f)->sync());
  REQUIRE((*f)->close());
  CHECK_FALSE((*f)->append("late"));  // closed files refuse writes
  CHECK(e.read_file("/a/b/x").value() == "hello world");

  REQUIRE(e.put("/a/b/y", "old"));
  REQUIRE(e.rename_file("/a/b/x", "/a/b/y"));  // replaces
  CHECK_FALSE(e.file_exists("/a/b/x"));
  CHECK(e.read_file("/a/b/y").value() == "hello world");
  CHECK(e.list_dir("/a").value() == std::vector<std::string>{"b"});
  CHECK(e.list_dir("/a/b/").value() == std::vector<std::string>{"y"});
  REQUIRE(e.remove_file("/a/b/y"));
  CHECK(e.list_dir("/a/b").value().empty());
  CHECK(e.files().empty());
  REQUIRE(e.sync_dir("/a/b"));
}

TEST_CASE("mem_env files read_into their caller's memory", "[unit][mem_env]") {
  mem_env e;
  REQUIRE(e.put("/f", "0123456789"));
  auto f = e.new_readable_file("/f");
  REQUIRE(f);
  char buf[4] = {};
  REQUIRE((*f)->read_into(6, std::span<char>(buf, 4)));
  CHECK(std::string(buf, 4) == "6789");
  const auto past = (*f)->read_into(7, std::span<char>(buf, 4));
  REQUIRE_FALSE(past);
  CHECK_THAT(past.error().message, Catch::Contains("ended at byte 10"));
}

TEST_CASE("mem_env reports missing paths like the OS does", "[unit][mem_env]") {
  mem_env e;
  auto r = e.read_file("/nope");
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "open /nope: No such file or directory");
  CHECK_FALSE(e.new_writable_file("/missing/dir/f"));
  CHECK_FALSE(e.remove_file("/nope"));
  CHECK_FALSE(e.rename_file("/nope", "/x"));
  CHECK_FALSE(e.sync_dir("/missing"));
  CHECK_FALSE(e.list_dir("/missing"));
  REQUIRE(e.put("/f", "x"));
  CHECK_FALSE(e.rename_file("/f", "/missing/g"));
  CHECK(e.read_file("/f").value() == "x");  // a failed rename leaves the source
  CHECK_FALSE(e.create_dirs("/f/sub"));     // a file is in the way
}

TEST_CASE("mem_env files keep writing to their inode after rename or truncate", "[unit][mem_env]") {
  mem_env e;
  auto f = e.new_writable_file("/t");
  REQUIRE(f);
  REQUIRE((*f)->append("ab"));
  REQUIRE(e.rename_file("/t", "/u"));
  REQUIRE((*f)->append("cd"));
  CHECK(e.read_file("/u").value() == "abcd");
  auto g = e.new_writable_file("/u");  // truncates by replacing the entry
  REQUIRE(g);
  REQUIRE((*f)->append("ef"));  // the old writer's bytes go to the unlinked inode
  CHECK(e.read_file("/u").value() == "");
}

TEST_CASE("mem_env write_at patches what the handle wrote, never past it", "[unit][mem_env]") {
  mem_env e;
  auto f = e.new_writable_file("/p");
  REQUIRE(f);
  REQUIRE((*f)->append("head=00;"));
  REQUIRE((*f)->write_at(5, "ok"));
  REQUIRE((*f)->append("tail"));
  CHECK(e.read_file("/p").value() == "head=ok;tail");
  auto past = (*f)->write_at(10, "xyz");
  REQUIRE_FALSE(past);
  CHECK_THAT(past.error().message, Catch::Contains("/p") && Catch::Contains("byte 10"));
  REQUIRE((*f)->close());
  CHECK_FALSE((*f)->write_at(0, "h"));  // closed

  auto a = e.new_appendable_file("/log");
  REQUIRE(a);
  REQUIRE((*a)->append("x"));
  CHECK_FALSE((*a)->write_at(0, "y"));
  CHECK(e.read_file("/log").value() == "x");
}

TEST_CASE("mem_env works with os::write_file_atomic", "[unit][mem_env]") {
  mem_env e;
  REQUIRE(e.create_dirs("/d"));
  REQUIRE(baton::os::write_file_atomic(e, "/d/state", "one"));
  REQUIRE(baton::os::write_file_atomic(e, "/d/state", "two"));
  CHECK(e.files() == std::map<std::string, std::string>{{"/d/state", "two"}});
  CHECK_FALSE(baton::os::write_file_atomic(e, "/nodir/state", "x"));
}

TEST_CASE("mem_env is safe to use from several threads", "[unit][mem_env]") {
  mem_env e;
  REQUIRE(e.create_dirs("/p"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&e, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string path = "/p/f" + std::to_string(t) + "-" + std::to_string(i % 5);
        (void)baton::os::write_file_atomic(e, path, std::string(64, static_cast<char>('a' + t)));
        (void)e.list_dir("/p");
        (void)e.read_file(path);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto files = e.files();
  CHECK(files.size() == 20);  // temp files all renamed away
  for (const auto& [p, d] : files) CHECK(d.size() == 64);
}

TEST_CASE("mem_env folders: stat, rename as a whole, remove recursively", "[unit][mem_env]") {
  baton::os::mem_env e;
  REQUIRE(e.create_dirs("/c/.staging-0/step-1/sub"));
  REQUIRE(e.put("/c/.staging-0/step-1/a", "aaa"));
  REQUIRE(e.put("/c/.staging-0/step-1/sub/b", "b"));
  REQUIRE(e.put("/c/.staging-0x", "not inside"));
  auto a = e.stat_no_follow("/c/.staging-0/step-1/a");
  REQUIRE(a);
  CHECK(a->kind == baton::os::entry_kind::regular);
  CHECK(a->size == 3);
  CHECK(e.stat_no_follow("/c/.staging-0/step-1/sub")->kind == baton::os::entry_kind::directory);
  CHECK(e.stat_no_follow("/c/none")->kind == baton::os::entry_kind::missing);
  CHECK(e.sync_file("/c/.staging-0/step-1/a"));
  CHECK_FALSE(e.sync_file("/c/none"));

  REQUIRE(e.rename_file("/c/.staging-0/step-1", "/c/ckpt-000000000001"));
  CHECK(*e.read_file("/c/ckpt-000000000001/sub/b") == "b");
  CHECK_FALSE(e.file_exists("/c/.staging-0/step-1"));
  CHECK(*e.list_dir("/c/ckpt-000000000001") == std::vector<std::string>{"a", "sub"});
  // Like rename(2), a folder never replaces an existing entry here.
  REQUIRE(e.create_dirs("/c/other"));
  CHECK_FALSE(e.rename_file("/c/ckpt-000000000001", "/c/other"));

  REQUIRE(e.remove_dir_all("/c/.staging-0"));
  REQUIRE(e.remove_dir_all("/c/ckpt-000000000001"));
  CHECK_FALSE(e.file_exists("/c/ckpt-000000000001/sub/b"));
  CHECK_FALSE(e.file_exists("/c/ckpt-000000000001"));
  CHECK(*e.read_file("/c/.staging-0x") == "not inside");  // a sibling with the same prefix stays
  CHECK(e.remove_dir_all("/c/never"));
}

TEST_CASE("mem_env opens untrusted files with the same checks", "[unit][mem_env]") {
  baton::os::mem_env e;
  const auto dir = baton::test::abs_path("/ckpt");
  REQUIRE(e.create_dirs(dir / "sub"));
  REQUIRE(e.put(dir / "f", "0123456789"));
  REQUIRE(e.create_dirs(baton::test::abs_path("/other")));
  REQUIRE(e.put(baton::test::abs_path("/other/f"), "x"));
  auto ok = e.new_untrusted_readable_file(dir / "f", {10, dir});
  REQUIRE(ok);
  CHECK((*ok)->size() == 10);
  auto big = e.new_untrusted_readable_file(dir / "f", {9, dir});
  REQUIRE_FALSE(big);
  CHECK_THAT(big.error().message, Catch::Contains("larger than the cap of 9 bytes"));
  auto folder = e.new_untrusted_readable_file(dir / "sub", {10, dir});
  REQUIRE_FALSE(folder);
  CHECK_THAT(folder.error().message, Catch::Contains("a folder"));
  auto out = e.new_untrusted_readable_file(dir / ".." / "other" / "f", {10, dir});
  REQUIRE_FALSE(out);
  CHECK_THAT(out.error().message, Catch::Contains("outside"));
  auto missing = e.new_untrusted_readable_file(dir / "nope", {10, dir});
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("does not exist"));
}

TEST_CASE("mem_env gives files an identity that a rewrite or replacement changes",
          "[unit][mem_env]") {
  baton::os::mem_env e;
  REQUIRE(e.create_dirs("/d"));
  REQUIRE(e.put("/d/a", "one"));
  const auto first = e.stat_no_follow("/d/a");
  REQUIRE(first);
  REQUIRE(first->identity);
  CHECK(e.stat_no_follow("/d/a")->identity == first->identity);  // stable while untouched
  // An untrusted open reports the identity of what it read.
  auto f = e.new_untrusted_readable_file("/d/a", {1 << 20, "/d"});
  REQUIRE(f);
  CHECK((*f)->identity() == first->identity);
  // Renamed: the same file, the same identity.
  REQUIRE(e.rename_file("/d/a", "/d/b"));
  CHECK(e.stat_no_follow("/d/b")->identity == first->identity);
  // Written to: the same inode, another time.
  auto w = e.new_appendable_file("/d/b");
  REQUIRE(w);
  REQUIRE((*w)->append("!"));
  const auto written = e.stat_no_follow("/d/b");
  CHECK(written->identity->inode == first->identity->inode);
  CHECK(written->identity != first->identity);
  // Replaced under the same name: another inode.
  REQUIRE(e.put("/d/b", "one!"));
  CHECK(e.stat_no_follow("/d/b")->identity->inode != first->identity->inode);
  CHECK_FALSE(e.stat_no_follow("/d")->identity);  // folders have none
}
