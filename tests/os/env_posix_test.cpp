// POSIX-only env behaviour: symlinks and FIFOs, which stat_no_follow must report as what they
// are (a checkpoint folder refuses both).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

namespace {

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A folder the no-follow env guards, with a user's folder in it, and outside both a "secret"
// file and folder standing for /etc/shadow and /etc: what links planted in the user's folder
// point at.
struct guarded {
  guarded(const std::string& name)
      : top(baton::test::fresh_scratch_dir("baton-env-no-follow-" + name)),
        root(top / "jobs"),
        job(root / "j-1"),
        outside(top / "etc") {
    fs::create_directories(job);
    fs::create_directories(outside / "sub");
    std::ofstream(outside / "shadow") << "secret";
    std::ofstream(outside / "sub" / "keep") << "keep";
    auto made = baton::os::make_no_follow_env(root);
    REQUIRE(made);
    e = std::move(*made);
  }
  ~guarded() { fs::remove_all(top); }
  fs::path top, root, job, outside;
  std::unique_ptr<baton::os::env> e;
};

}  // namespace

TEST_CASE("the no-follow env never follows a link planted below its root, at any depth",
          "[unit][env]") {
  guarded g("links");
  auto& e = *g.e;
  fs::create_symlink(g.outside / "shadow", g.job / "worker.log");
  fs::create_directory_symlink(g.outside, g.job / "checkpoints");

  // Last component a link: no write, append, read or truncation through it.
  CHECK_FALSE(e.new_appendable_file(g.job / "worker.log"));
  CHECK_FALSE(e.new_writable_file(g.job / "worker.log"));
  auto read = e.read_file(g.job / "worker.log");
  REQUIRE_FALSE(read);
  CHECK_THAT(read.error().message, Catch::Contains("a symlink"));
  CHECK_FALSE(e.new_readable_file(g.job / "worker.log"));
  // A link on the way: nothing reached through it, whatever the operation.
  CHECK_FALSE(e.new_writable_file(g.job / "checkpoints" / "shadow"));
  CHECK_FALSE(e.read_file(g.job / "checkpoints" / "shadow"));
  CHECK_FALSE(e.remove_file(g.job / "checkpoints" / "shadow"));
  CHECK_FALSE(e.remove_dir_all(g.job / "checkpoints" / "sub"));
  CHECK_FALSE(e.list_dir(g.job / "checkpoints"));
  CHECK_FALSE(e.create_dirs(g.job / "checkpoints" / "new"));
  CHECK_FALSE(e.rename_file(g.job / "checkpoints" / "shadow", g.job / "stolen"));
  CHECK_FALSE(e.file_exists(g.job / "checkpoints" / "shadow"));
  auto via = e.stat_no_follow(g.job / "checkpoints" / "shadow");
  REQUIRE(via);
  CHECK(via->kind == baton::os::entry_kind::missing);
  auto untrusted = e.new_untrusted_readable_file(g.job / "checkpoints" / "shadow", {1 << 20, {}});
  CHECK_FALSE(untrusted);
  CHECK_FALSE(e.set_owner(g.job / "checkpoints", 0, 0, 0700));
  // The link itself is an entry that can be removed, never followed.
  REQUIRE(e.remove_dir_all(g.job / "checkpoints"));
  CHECK_FALSE(fs::is_symlink(g.job / "checkpoints"));
  REQUIRE(e.remove_file(g.job / "worker.log"));

  CHECK(text_of(g.outside / "shadow") == "secret");
  CHECK(text_of(g.outside / "sub" / "keep") == "keep");
  CHECK(fs::exists(g.outside / "sub"));
}

TEST_CASE("the no-follow env removes a tree by descriptor: links inside are removed, not followed",
          "[unit][env]") {
  guarded g("tree");
  auto& e = *g.e;
  const auto tree = g.job / "checkpoints" / "ckpt-1";
  fs::create_directories(tree / "deep" / "deeper");
  std::ofstream(tree / "deep" / "weights") << "w";
  fs::create_directory_symlink(g.outside, tree / "deep" / "etc");
  fs::create_symlink(g.outside / "shadow", tree / "deep" / "deeper" / "shadow");
  REQUIRE(e.remove_dir_all(g.job / "checkpoints"));
  CHECK_FALSE(fs::exists(g.job / "checkpoints"));
  CHECK(text_of(g.outside / "shadow") == "secret");
  CHECK(text_of(g.outside / "sub" / "keep") == "keep");
  // A missing folder is nothing to remove, as with the plain env.
  CHECK(e.remove_dir_all(g.job / "gone"));
}

TEST_CASE("the no-follow env opens no FIFO and no file with other names (a hard link)",
          "[unit][env]") {
  guarded g("special");
  auto& e = *g.e;
  REQUIRE(::mkfifo((g.job / "record.0.json").c_str(), 0600) == 0);
  // Would block forever on a plain open for reading; here it is refused at once.
  auto fifo = e.read_file(g.job / "record.0.json");
  REQUIRE_FALSE(fifo);
  CHECK_THAT(fifo.error().message, Catch::Contains("not a regular file"));
  CHECK_FALSE(e.new_appendable_file(g.job / "record.0.json"));
  // A second name for a file elsewhere in the same file system: neither truncated nor appended.
  std::error_code ec;
  fs::create_hard_link(g.outside / "shadow", g.job / "history.jsonl", ec);
  REQUIRE_FALSE(ec);
  auto w = e.new_writable_file(g.job / "history.jsonl");
  REQUIRE_FALSE(w);
  CHECK_THAT(w.error().message, Catch::Contains("2 links"));
  CHECK_FALSE(e.new_appendable_file(g.job / "history.jsonl"));
  CHECK(text_of(g.outside / "shadow") == "secret");
}

TEST_CASE("the no-follow env works as the plain one on real files, inside its root and out",
          "[unit][env]") {
  guarded g("plain");
  auto& e = *g.e;
  REQUIRE(e.create_dirs(g.job / "checkpoints" / ".staging-0"));
  REQUIRE(baton::os::write_file_atomic(e, g.job / "record.0.json", "{}"));
  auto text = e.read_file(g.job / "record.0.json");
  REQUIRE(text);
  CHECK(*text == "{}");
  {
    auto log = e.new_appendable_file(g.job / "worker.log");
    REQUIRE(log);
    REQUIRE((*log)->append("line\n"));
    REQUIRE((*log)->close());
  }
  REQUIRE(e.rename_file(g.job / "worker.log", g.job / "worker.log.1"));
  auto names = e.list_dir(g.job);
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"checkpoints", "record.0.json", "worker.log.1"});
  auto file = e.new_readable_file(g.job / "worker.log.1");
  REQUIRE(file);
  REQUIRE((*file)->owner_uid());
  CHECK(*(*file)->owner_uid() == ::geteuid());
  CHECK(e.file_exists(g.job / "checkpoints" / ".staging-0"));
  REQUIRE(e.sync_dir(g.job));
  REQUIRE(e.remove_dir_all(g.job / "checkpoints"));
  CHECK_FALSE(e.file_exists(g.job / "checkpoints"));
  // Outside the root (and the root itself) nothing changes: a link there is followed as before.
  fs::create_symlink(g.outside / "shadow", g.top / "link");
  auto outside = e.read_file(g.top / "link");
  REQUIRE(outside);
  CHECK(*outside == "secret");
  CHECK(e.file_exists(g.root));
}

TEST_CASE("a reused file is written over in place and cut to what was written", "[unit][env]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-env-posix-test-reuse");
  auto& e = baton::os::env::default_env();
  const auto old_file = dir / "old";
  REQUIRE(baton::os::write_file_atomic(e, old_file, std::string(100000, 'o')));
  struct stat before {};
  REQUIRE(::stat(old_file.c_str(), &before) == 0);
  // Written over through write_file_atomic: the same inode, the new bytes, nothing of the old.
  const auto target = dir / "new";
  REQUIRE(baton::os::write_file_atomic(
      e, target, [](baton::os::writable_file& f) { return f.append("shorter"); }, old_file));
  CHECK_FALSE(fs::exists(old_file));
  struct stat after {};
  REQUIRE(::stat(target.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  auto text = e.read_file(target);
  REQUIRE(text);
  CHECK(*text == "shorter");
  // A file to reuse that is not there is no error: a new file is made.
  REQUIRE(baton::os::write_file_atomic(
      e, dir / "fresh", [](baton::os::writable_file& f) { return f.append("made"); },
      dir / "missing"));
  CHECK(*e.read_file(dir / "fresh") == "made");
  // reuse_writable_file itself creates nothing: a missing file is an error naming it.
  auto none = e.reuse_writable_file(dir / "missing");
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains((dir / "missing").string()));
  fs::remove_all(dir);
}

TEST_CASE("set_owner hands a folder to a user without following a link", "[unit][env]") {
  if (::geteuid() != 0) BATON_SKIP("giving a folder to another uid needs root (CI runs as root)");
  guarded g("owner");
  auto& e = *g.e;
  REQUIRE(e.create_dirs(g.job / "checkpoints"));
  REQUIRE(e.set_owner(g.job / "checkpoints", 61234, 61235, 0700));
  struct stat st {};
  REQUIRE(::lstat((g.job / "checkpoints").c_str(), &st) == 0);
  CHECK(st.st_uid == 61234);
  CHECK(st.st_gid == 61235);
  CHECK((st.st_mode & 07777) == 0700);
  auto info = e.stat_no_follow(g.job / "checkpoints");
  REQUIRE(info);
  CHECK(info->owner_uid == 61234u);
  fs::create_symlink(g.outside / "shadow", g.job / "link");
  CHECK_FALSE(e.set_owner(g.job / "link", 61234, 61235, 0777));
  REQUIRE(::lstat((g.outside / "shadow").c_str(), &st) == 0);
  CHECK(st.st_uid == 0);
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
