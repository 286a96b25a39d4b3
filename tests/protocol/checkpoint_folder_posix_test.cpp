// Folder checkpoints on a real POSIX disk: symlinks and FIFOs (which os::mem_env cannot hold) are
// refused when sealing and detected when verifying, naming the entry.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "os/env.h"
#include "protocol/checkpoint_folder.h"
#include "protocol/checkpoint_store.h"
#include "support/test_paths.h"

using namespace baton::protocol;
namespace fs = std::filesystem;

namespace {

fs::path staged(const fs::path& root, const std::string& name) {
  const auto dir = root / ".staging-0" / name;
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "model.pt") << "weights";
  std::ofstream(dir / "sub" / "opt.pt") << "moments";
  return dir;
}

}  // namespace

TEST_CASE("sealing refuses a symlink or a FIFO anywhere in the folder",
          "[unit][checkpoint_folder]") {
  auto& e = baton::os::env::default_env();
  const auto root = baton::test::fresh_scratch_dir("baton-folder-posix-seal");
  std::string bad;
  std::string why;
  const auto dir = staged(root, "step-3");
  SECTION("a symlink to a file outside") {
    std::ofstream(root / "secret") << "x";
    fs::create_symlink(root / "secret", dir / "sub" / "link");
    bad = (dir / "sub" / "link").string();
    why = "a symlink";
  }
  SECTION("a symlink to a folder") {
    fs::create_directory_symlink(root, dir / "up");
    bad = (dir / "up").string();
    why = "a symlink";
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo((dir / "sub" / "pipe").c_str(), 0600) == 0);
    bad = (dir / "sub" / "pipe").string();
    why = "a special file";
  }
  auto r = seal_checkpoint_folder(e, dir, root, "j", 3);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith(bad + ": " + why));
  CHECK_FALSE(fs::exists(root / "ckpt-000000000003"));
  fs::remove_all(root);
}

TEST_CASE("a symlink or FIFO added to a sealed folder is detected and the previous one used",
          "[unit][checkpoint_folder]") {
  auto& e = baton::os::env::default_env();
  const auto root = baton::test::fresh_scratch_dir("baton-folder-posix-verify");
  REQUIRE(seal_checkpoint_folder(e, staged(root, "a"), root, "j", 4));
  auto sealed = seal_checkpoint_folder(e, staged(root, "b"), root, "j", 8);
  REQUIRE(sealed);
  REQUIRE(verify_checkpoint_folder(e, sealed->path));
  fs::path bad;
  SECTION("a symlink replacing a file") {
    bad = sealed->path / "model.pt";
    std::ofstream(root / "copy") << "weights";
    fs::remove(bad);
    fs::create_symlink(root / "copy", bad);
  }
  SECTION("a FIFO") {
    bad = sealed->path / "sub" / "fifo";
    REQUIRE(::mkfifo(bad.c_str(), 0600) == 0);
  }
  SECTION("the whole folder replaced by a symlink") {
    const auto moved = root / "elsewhere";
    fs::rename(sealed->path, moved);
    fs::create_directory_symlink(moved, sealed->path);
    bad = sealed->path;
  }
  auto r = verify_checkpoint_folder(e, sealed->path);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith(bad.string() + ": a s"));
  checkpoint_store store(e, root, 3);
  auto v = store.newest_verified();
  REQUIRE(v);
  REQUIRE(v->path);
  CHECK(*v->path == root / "ckpt-000000000004");
  REQUIRE(v->rejected.size() == 1);
  CHECK(v->rejected[0] == r.error().message);
  fs::remove_all(root);
}
