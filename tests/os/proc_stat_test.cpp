#include "os/posix/proc_stat.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <vector>

namespace procfs = baton::os::procfs;

TEST_CASE("parse_stat reads pid, state, ppid, pgrp and session", "[unit][procfs]") {
  auto e = procfs::parse_stat("4242 (python3) S 17 4242 17 34816 4242 4194304 0 0\n");
  REQUIRE(e);
  CHECK(e->pid == 4242);
  CHECK(e->state == 'S');
  CHECK(e->ppid == 17);
  CHECK(e->pgid == 4242);
  CHECK(e->sid == 17);
}

TEST_CASE("parse_stat counts fields after the last parenthesis", "[unit][procfs]") {
  // A command name can hold spaces and ')' (prctl PR_SET_NAME takes any bytes).
  auto e = procfs::parse_stat("77 (evil) Z 1 2 (x) R 5 6 7 8 9");
  REQUIRE(e);
  CHECK(e->pid == 77);
  CHECK(e->state == 'R');
  CHECK(e->ppid == 5);
  CHECK(e->pgid == 6);
  CHECK(e->sid == 7);
}

TEST_CASE("parse_stat rejects malformed text with the field named", "[unit][procfs]") {
  CHECK_FALSE(procfs::parse_stat(""));
  CHECK_FALSE(procfs::parse_stat("12 python S 1 2 3"));
  auto r = procfs::parse_stat("12 (a) S x 2 3");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("ppid") != std::string::npos);
  r = procfs::parse_stat("abc (a) S 1 2 3");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("pid") != std::string::npos);
}

TEST_CASE("parse_statm_resident_pages reads the second field", "[unit][procfs]") {
  auto r = procfs::parse_statm_resident_pages("10000 2500 300 10 0 900 0\n");
  REQUIRE(r);
  CHECK(*r == 2500);
  CHECK_FALSE(procfs::parse_statm_resident_pages("10000"));
  CHECK_FALSE(procfs::parse_statm_resident_pages("10000 -5 1"));
}

TEST_CASE("descendants_of walks the whole tree and survives cycles", "[unit][procfs]") {
  const std::vector<procfs::proc_entry> table = {
      {1, 0, 1, 1, 'S'},     {10, 1, 10, 10, 'S'}, {11, 10, 10, 10, 'S'}, {12, 11, 12, 12, 'S'},
      {13, 10, 10, 10, 'Z'}, {20, 1, 20, 20, 'S'}, {30, 31, 30, 30, 'S'}, {31, 30, 30, 30, 'S'}};
  auto d = procfs::descendants_of(table, 10);
  std::sort(d.begin(), d.end());
  CHECK(d == std::vector<std::int64_t>{11, 12, 13});
  CHECK(procfs::descendants_of(table, 12).empty());
  auto cyc = procfs::descendants_of(table, 30);
  CHECK(cyc == std::vector<std::int64_t>{31});
}

TEST_CASE("list_processes and rss_bytes_of see this process", "[integration][procfs]") {
  auto table = procfs::list_processes();
  REQUIRE(table);
  const auto self = static_cast<std::int64_t>(::getpid());
  auto it = std::find_if(table->begin(), table->end(), [&](auto& e) { return e.pid == self; });
  REQUIRE(it != table->end());
  CHECK(it->ppid == ::getppid());
  auto rss = procfs::rss_bytes_of(self);
  REQUIRE(rss);
  CHECK(*rss > 0);
  CHECK_FALSE(procfs::rss_bytes_of(-1));
}

TEST_CASE("a kept-open kernel file reads fresh text each time, and reopens once gone",
          "[integration][procfs]") {
  procfs::kernel_file statm("/proc/self/statm");
  auto resident = [&] {
    auto text = statm.read();
    REQUIRE(text);
    auto pages = procfs::parse_statm_resident_pages(*text);
    REQUIRE(pages);
    return *pages;
  };
  const auto before = resident();
  // 64 MiB touched: the same descriptor must see it, not the text of the first read.
  std::vector<char> block(64 << 20);
  for (std::size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i);
  const auto after = resident();
  CHECK(after >= before + (60 << 20) / static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  CHECK(block[4096] == static_cast<char>(4096));

  // A file as long as several buffers is read whole (the first read fills 4 KiB).
  procfs::kernel_file maps("/proc/self/maps");
  auto whole = procfs::read_kernel_file("/proc/self/maps");
  REQUIRE(whole);
  auto kept = maps.read();
  REQUIRE(kept);
  CHECK(kept->size() > 4096);
  CHECK(kept->find("[stack]") != std::string_view::npos);

  // A child's file: gone with the child, then an error naming it (and no stale text).
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  REQUIRE(child > 0);
  procfs::kernel_file theirs("/proc/" + std::to_string(child) + "/statm");
  REQUIRE(theirs.read());
  ::kill(child, SIGKILL);
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  int err = 0;
  auto gone = theirs.read(&err);
  REQUIRE_FALSE(gone);
  CHECK(err == ESRCH);
  CHECK_THAT(gone.error().message, Catch::Contains(theirs.path()));
  CHECK_FALSE(theirs.read());  // opened again: there is nothing to open
}
