// Crash points: a real process performs one save and dies by std::abort() right after its Nth
// file operation, for every N a save has. Recovery in this process must then see either the old
// state or the new one, whole: never an error, never a torn file, never a mix of generations.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "crash/crash_fixtures.h"
#include "os/env.h"
#include "os/fault_env.h"
#include "protocol/checkpoint_store.h"
#include "supervisor/job_store.h"
#include "support/run_process.h"

#ifndef BATON_CRASH_SAVE_EXE
#error "BATON_CRASH_SAVE_EXE is set by tests/crash/CMakeLists.txt"
#endif

namespace fs = std::filesystem;
using baton::os::exit_status;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace crash_points_test {

constexpr int sigabrt = 6;

fs::path scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("baton-crash-points-" + name);
  fs::remove_all(dir);
  return dir;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Expected fate of the helper when told to die after operation n of a save with `ops`.
exit_status expected_exit(std::int64_t n, std::int64_t ops) {
  return n <= ops ? exit_status::signaled(sigabrt) : exit_status::exited(0);
}

std::string encoded(std::int64_t step) {
  auto bytes = baton::protocol::encode_checkpoint(baton::crash::checkpoint_at(step));
  REQUIRE(bytes);
  return *bytes;
}

TEST_CASE("a checkpoint save killed after any operation leaves the old or the new checkpoint",
          "[integration][crash_points]") {
  using baton::protocol::checkpoint_store;
  constexpr int keep = 2;
  constexpr std::int64_t old_step = 100;
  constexpr std::int64_t new_step = 200;
  const auto root = scratch("checkpoint");
  auto& real = baton::os::env::default_env();

  // The old state: two checkpoints, so the new save also prunes (a remove is one of its ops).
  const auto prepare = [&](const fs::path& dir) {
    fs::remove_all(dir);
    checkpoint_store s(real, dir, keep);
    REQUIRE(s.save(baton::crash::checkpoint_at(50)));
    REQUIRE(s.save(baton::crash::checkpoint_at(old_step)));
  };

  // How many mutating operations one such save makes, counted on an identical folder.
  std::int64_t ops = 0;
  {
    const auto dir = root / "count";
    prepare(dir);
    baton::os::fault_env fe(real);
    checkpoint_store s(fe, dir, keep);
    REQUIRE(s.save(baton::crash::checkpoint_at(new_step)));
    ops = fe.op_count();
    // open, appends (the header, then the tensors: the writer streams), fsync, close, rename,
    // fsync folder, remove the oldest.
    REQUIRE(ops >= 7);
  }

  const std::string old_bytes = encoded(old_step);
  const std::string new_bytes = encoded(new_step);
  int saw_old = 0;
  int saw_new = 0;
  for (std::int64_t n = 0; n <= ops + 1; ++n) {
    CAPTURE(n, ops);
    const auto dir = root / ("n" + std::to_string(n));
    prepare(dir);
    auto run = baton::test::run_process(
        {BATON_CRASH_SAVE_EXE, "checkpoint", dir.string(), std::to_string(keep),
         std::to_string(new_step), std::to_string(n)},
        {}, root / "helper.log", std::chrono::seconds(30));
    REQUIRE_FALSE(run.timed_out);
    CHECK(run.status == expected_exit(n, ops));

    checkpoint_store s(real, dir, keep);
    auto loaded = s.load_newest();
    REQUIRE(loaded);  // never an error
    REQUIRE(loaded->has_value());
    CHECK((*loaded)->rejected.empty());  // no torn file is ever visible under a checkpoint name
    const auto step = (*loaded)->data.step();
    const std::string on_disk = read_all((*loaded)->path);
    if (step == old_step) {
      ++saw_old;
      CHECK(on_disk == old_bytes);
    } else {
      ++saw_new;
      CHECK(step == new_step);
      CHECK(on_disk == new_bytes);
    }
    // Whatever survived, the next save works and cleans up the crashed writer's leftovers.
    REQUIRE(s.save(baton::crash::checkpoint_at(300)));
    auto after = s.load_newest();
    REQUIRE(after);
    CHECK((*after)->data.step() == 300);
  }
  // Both outcomes really happen: a crash before the rename keeps the old, after it the new.
  CHECK(saw_old >= 4);
  CHECK(saw_new >= 3);
  fs::remove_all(root);
}

TEST_CASE("a record save killed after any operation leaves the old or the new record",
          "[integration][crash_points]") {
  using baton::supervisor::job_store;
  const auto root = scratch("record");
  auto& real = baton::os::env::default_env();
  const std::string id = "crashjob";

  baton::protocol::job_spec spec;
  spec.name = id;
  spec.model->layers = {{4, baton::protocol::activation::relu},
                        {1, baton::protocol::activation::sigmoid}};
  spec.data = baton::protocol::synthetic_data{64, 3, 1};

  // The old state: two generations on disk, so both slots hold a valid record.
  const auto prepare = [&](const fs::path& state) -> std::string {
    fs::remove_all(state);
    job_store store(real, state);
    REQUIRE(store.open());
    auto r = store.create(spec, 1000, id);
    REQUIRE(r);
    r->state = baton::supervisor::job_state::running;
    r->checkpoint_step = 100;
    REQUIRE(store.save(*r));
    auto back = store.load(id);
    REQUIRE(back);
    return baton::crash::fingerprint(back->record);
  };

  std::int64_t ops = 0;
  {
    const auto state = root / "count";
    prepare(state);
    baton::os::fault_env fe(real);
    job_store store(fe, state);
    auto r = store.load(id);
    REQUIRE(r);
    baton::crash::advance_record(r->record);
    REQUIRE(store.save(r->record));
    ops = fe.op_count();
    // open, append, fsync, close, rename, fsync folder.
    REQUIRE(ops == 6);
  }

  int saw_old = 0;
  int saw_new = 0;
  for (std::int64_t n = 0; n <= ops + 1; ++n) {
    CAPTURE(n, ops);
    const auto state = root / ("n" + std::to_string(n));
    const std::string old_fp = prepare(state);
    const auto intended = root / ("intended-" + std::to_string(n));
    auto run = baton::test::run_process(
        {BATON_CRASH_SAVE_EXE, "record", state.string(), id, std::to_string(n), intended.string()},
        {}, root / "helper.log", std::chrono::seconds(30));
    REQUIRE_FALSE(run.timed_out);
    CHECK(run.status == expected_exit(n, ops));
    const std::string new_fp = read_all(intended);
    REQUIRE_FALSE(new_fp.empty());
    REQUIRE(new_fp != old_fp);

    job_store store(real, state);
    auto loaded = store.load(id);
    REQUIRE(loaded);  // never an error
    CHECK(loaded->rejected.empty());
    const std::string got = baton::crash::fingerprint(loaded->record);
    if (got == old_fp) {
      ++saw_old;
    } else {
      ++saw_new;
      CHECK(got == new_fp);  // whole: every field of the new generation, nothing of the old
    }
    // The job carries on: a further save lands and is what loads next.
    auto rec = loaded->record;
    rec.diagnosis = "after recovery";
    REQUIRE(store.save(rec));
    auto again = store.load(id);
    REQUIRE(again);
    CHECK(baton::crash::fingerprint(again->record) == baton::crash::fingerprint(rec));
  }
  CHECK(saw_old >= 4);
  CHECK(saw_new >= 2);
  fs::remove_all(root);
}

}  // namespace crash_points_test
