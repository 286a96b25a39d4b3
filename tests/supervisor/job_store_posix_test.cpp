// The job store in system mode, on the real disk: job folders handed to their owners, and
// record slots that count only when the daemon wrote them. Giving a folder to another uid needs
// root (CI runs as root); skipped otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "os/env.h"
#include "supervisor/job_store.h"
#include "support/skip.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

baton::protocol::job_spec small_spec(const std::string& name) {
  baton::protocol::job_spec spec;
  spec.name = name;
  spec.model->layers = {{1, baton::protocol::activation::sigmoid}};
  spec.data = baton::protocol::synthetic_data{64, 3, 1};
  return spec;
}

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

}  // namespace

TEST_CASE("a handed-over job folder is its owner's, and only the daemon's record slots count",
          "[unit][job_store]") {
  if (::geteuid() != 0) BATON_SKIP("giving a folder to another uid needs root (CI runs as root)");
  const auto state = baton::test::fresh_scratch_dir("baton-job-store-posix-owner");
  auto confined = baton::os::make_no_follow_env(state / "jobs");
  REQUIRE(confined);
  job_store store(**confined, state);
  REQUIRE(store.open());
  store.require_record_owner(0);
  const job_owner alice{61234, 61235, {61236}};
  auto r = store.create(small_spec("mine"), 10, std::nullopt, alice, true);
  REQUIRE(r);
  CHECK(r->owner == alice);
  for (const auto& p : {store.job_dir(r->id), store.checkpoint_dir(r->id)}) {
    const auto st = lstat_of(p);
    CHECK(st.st_uid == 61234);
    CHECK(st.st_gid == 61235);
    CHECK((st.st_mode & 07777) == 0700);
  }
  // The daemon's files were written before the hand-over and stay the daemon's.
  CHECK(lstat_of(store.spec_path(r->id)).st_uid == 0);
  auto loaded = store.load(r->id);
  REQUIRE(loaded);
  REQUIRE(loaded->record.owner);
  CHECK(loaded->record.owner->uid == 61234);

  // The folder's user may put a file of their own in a slot's place: it is no record, whatever
  // it says.
  const auto slot = store.job_dir(r->id) / "record.1.json";
  REQUIRE(fs::exists(slot));
  REQUIRE(::chown(slot.c_str(), 61234, 61235) == 0);
  auto forged = store.load(r->id);
  REQUIRE_FALSE(forged);
  CHECK_THAT(forged.error().message, Catch::Contains("owned by uid 61234, not the daemon's uid 0"));
  // Without the check (a daemon whose folders are all its own) the same slot loads.
  job_store trusting(**confined, state);
  CHECK(trusting.load(r->id));
  fs::remove_all(state);
}
