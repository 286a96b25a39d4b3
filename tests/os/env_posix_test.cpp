// POSIX-only env behaviour: symlinks and FIFOs, which stat_no_follow must report as what they
// are (a checkpoint folder refuses both).
#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "os/env.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;

TEST_CASE("posix env reports symlinks and FIFOs without following them", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = baton::test::fresh_scratch_dir("baton-env-posix-test-links");
  REQUIRE(baton::os::write_file_atomic(e, dir / "target", "data"));
  fs::create_symlink(dir / "target", dir / "link");
  fs::create_directory_symlink(dir, dir / "dirlink");
  fs::create_symlink(dir / "gone", dir / "dangling");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  for (const char* name : {"link", "dirlink", "dangling"}) {
    INFO(name);
    auto info = e.stat_no_follow(dir / name);
    REQUIRE(info);
    CHECK(info->kind == baton::os::entry_kind::symlink);
  }
  auto fifo = e.stat_no_follow(dir / "fifo");
  REQUIRE(fifo);
  CHECK(fifo->kind == baton::os::entry_kind::other);
  // Syncing never opens what a link points at.
  CHECK_FALSE(e.sync_file(dir / "link"));
  fs::remove_all(dir);
}

namespace {

// The message of an untrusted open that must fail.
std::string refused(baton::os::env& e, const fs::path& p, std::uint64_t cap,
                    const fs::path& within) {
  auto f = e.new_untrusted_readable_file(p, {cap, within});
  if (f) return "(opened)";
  return f.error().message;
}

}  // namespace

TEST_CASE("an untrusted open refuses what could hang, exhaust or escape the reader",
          "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto root = baton::test::fresh_scratch_dir("baton-env-posix-test-untrusted");
  const auto dir = root / "ckpt";
  const auto outside = root / "outside";
  fs::create_directories(dir);
  fs::create_directories(outside);
  REQUIRE(baton::os::write_file_atomic(e, dir / "good", "0123456789"));
  REQUIRE(baton::os::write_file_atomic(e, outside / "secret", "secret"));
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir / "zero");
  fs::create_symlink(outside / "secret", dir / "out");
  { std::ofstream(dir / "sparse").flush(); }
  fs::resize_file(dir / "sparse", 3ull << 29);  // 1.5 GiB of hole
  fs::create_directory(dir / "sub");

  auto good = e.new_untrusted_readable_file(dir / "good", {10, dir});
  REQUIRE(good);
  std::string bytes;
  REQUIRE((*good)->read(0, 10, bytes));
  CHECK(bytes == "0123456789");

  // Each of these returns at once: a blocking open of the FIFO would wait for a writer forever.
  CHECK_THAT(refused(e, dir / "fifo", 1 << 20, dir), Catch::Contains("a special file (FIFO"));
  CHECK_THAT(refused(e, dir / "zero", 1 << 20, dir), Catch::Contains("a symlink"));
  CHECK_THAT(refused(e, dir / "out", 1 << 20, dir), Catch::Contains("a symlink"));
  CHECK_THAT(refused(e, dir / "sparse", 1 << 30, dir),
             Catch::Contains("1610612736 bytes, larger than the cap of 1073741824 bytes"));
  CHECK_THAT(refused(e, dir / "good", 9, dir), Catch::Contains("larger than the cap of 9"));
  CHECK_THAT(refused(e, dir / "sub", 1 << 20, dir), Catch::Contains("a folder"));
  CHECK_THAT(refused(e, dir / "missing", 1 << 20, dir), Catch::Contains("No such file"));
  // A file reached through a linked folder resolves outside, whatever its own name says.
  fs::create_directory_symlink(outside, dir / "linked");
  CHECK_THAT(refused(e, dir / "linked" / "secret", 1 << 20, dir),
             Catch::Contains("resolves to " + (fs::canonical(outside) / "secret").string() +
                             ", outside " + dir.string()));
  // Without `within`, only the file itself is checked.
  CHECK(e.new_untrusted_readable_file(dir / "linked" / "secret", {100, {}}));
  fs::remove_all(root);
}

TEST_CASE("posix env gives a full disk the no_space code", "[unit][env]") {
  // /dev/full fails every write with ENOSPC.
  auto& e = baton::os::env::default_env();
  auto f = e.new_appendable_file("/dev/full");
  if (!f) BATON_SKIP("/dev/full cannot be opened here");
  auto s = (*f)->append("x");
  if (s) s = (*f)->sync();
  REQUIRE_FALSE(s);
  CHECK(s.error().code == baton::errc::no_space);
}

TEST_CASE("posix env identities: device and inode, and times that any write moves", "[unit][env]") {
  auto& e = baton::os::env::default_env();
  const auto dir = baton::test::fresh_scratch_dir("baton-env-posix-test-identity");
  const auto p = dir / "f";
  REQUIRE(baton::os::write_file_atomic(e, p, "content"));
  const auto first = e.stat_no_follow(p);
  REQUIRE(first);
  REQUIRE(first->identity);
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  CHECK(first->identity->inode == static_cast<std::uint64_t>(st.st_ino));
  CHECK(first->identity->device == static_cast<std::uint64_t>(st.st_dev));
  CHECK(e.stat_no_follow(p)->identity == first->identity);
  auto f = e.new_untrusted_readable_file(p, {1 << 20, dir});
  REQUIRE(f);
  CHECK((*f)->identity() == first->identity);
  f->reset();
  // Replaced by a rename (as every atomic write does): another inode, even with the same bytes.
  REQUIRE(baton::os::write_file_atomic(e, p, "content"));
  CHECK(e.stat_no_follow(p)->identity->inode != first->identity->inode);
  // Written in place, then its modification time put back: the change time still moved.
  const auto before = e.stat_no_follow(p);
  REQUIRE(before);
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the clock's granularity
  std::ofstream(p, std::ios::in | std::ios::out) << "C";
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
  const auto after = e.stat_no_follow(p);
  REQUIRE(after);
  CHECK(after->identity->inode == before->identity->inode);
  CHECK(after->identity->modified_ns == before->identity->modified_ns);
  CHECK(after->identity->changed_ns != before->identity->changed_ns);
  CHECK(after->identity != before->identity);
  CHECK_FALSE(e.stat_no_follow(dir)->identity);
  fs::remove_all(dir);
}
