// POSIX-only env behaviour: symlinks and FIFOs, which stat_no_follow must report as what they
// are (a checkpoint folder refuses both).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "os/env.h"
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
