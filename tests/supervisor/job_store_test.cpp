#include "supervisor/job_store.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "os/fault_env.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

fs::path store_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("baton-job-store-test-" + name);
  fs::remove_all(dir);
  return dir;
}

baton::protocol::job_spec two_layer_spec(const std::string& name) {
  baton::protocol::job_spec spec;
  spec.name = name;
  spec.model->layers = {{4, baton::protocol::activation::relu},
                        {1, baton::protocol::activation::sigmoid}};
  spec.data = baton::protocol::synthetic_data{64, 3, 1};
  return spec;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

}  // namespace

TEST_CASE("job store creates, saves and loads records", "[unit][job_store]") {
  const auto dir = store_dir("roundtrip");
  job_store store(baton::os::env::default_env(), dir);
  REQUIRE(store.open());
  auto r = store.create(two_layer_spec("tiny"), 10, std::string("tiny"));
  REQUIRE(r);
  CHECK(r->id == "tiny");
  CHECK(store.exists("tiny"));
  r->state = job_state::running;
  r->checkpoint_step = 5;
  REQUIRE(store.save(*r));
  auto back = store.load("tiny");
  REQUIRE(back);
  CHECK(back->record.state == job_state::running);
  CHECK(back->record.checkpoint_step == 5);
  CHECK(back->record.seq == r->seq);
  CHECK(back->rejected.empty());
  auto spec = store.load_spec("tiny");
  REQUIRE(spec);
  CHECK(spec->name == "tiny");
  fs::remove_all(dir);
}

TEST_CASE("job store picks fresh ids and refuses duplicates", "[unit][job_store]") {
  const auto dir = store_dir("ids");
  job_store store(baton::os::env::default_env(), dir);
  REQUIRE(store.open());
  auto a = store.create(two_layer_spec("seed"), 10);
  auto b = store.create(two_layer_spec("seed"), 10);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->id == "seed-1");
  CHECK(b->id == "seed-2");
  auto dup = store.create(two_layer_spec("seed"), 10, std::string("seed-1"));
  REQUIRE_FALSE(dup);
  CHECK(dup.error().message.find("already exists") != std::string::npos);
  auto ids = store.list();
  REQUIRE(ids);
  CHECK(*ids == std::vector<std::string>{"seed-1", "seed-2"});
  fs::remove_all(dir);
}

TEST_CASE("job ids cannot escape the state directory", "[unit][job_store]") {
  for (const std::string& bad : std::vector<std::string>{"", "..", "../x", "a/b", ".hidden", "a\\b",
                                                         "a b", std::string(81, 'x')}) {
    INFO(bad);
    CHECK_FALSE(validate_job_id(bad));
  }
  CHECK(validate_job_id("seed-1.v2_final"));
  job_store store(baton::os::env::default_env(), store_dir("escape"));
  CHECK_FALSE(store.load("../../etc"));
}

TEST_CASE("job store falls back to the previous slot when the newest is damaged",
          "[unit][job_store]") {
  const auto dir = store_dir("fallback");
  job_store store(baton::os::env::default_env(), dir);
  REQUIRE(store.open());
  auto r = store.create(two_layer_spec("tiny"), 10, std::string("tiny"));
  REQUIRE(r);
  r->checkpoint_step = 3;
  REQUIRE(store.save(*r));  // seq 2 -> slot 0
  r->checkpoint_step = 7;
  REQUIRE(store.save(*r));  // seq 3 -> slot 1
  const auto newest = store.job_dir("tiny") / "record.1.json";
  const std::string good = read_all(newest);

  SECTION("truncated") { write_all(newest, good.substr(0, good.size() / 2)); }
  SECTION("zeroed") { write_all(newest, std::string(good.size(), '\0')); }
  SECTION("a digit changed that still parses") {
    auto pos = good.find("\"checkpoint_step\": 7");
    REQUIRE(pos != std::string::npos);
    std::string bad = good;
    bad[pos + 19] = '9';
    write_all(newest, bad);
  }
  SECTION("sequence number changed") {
    auto pos = good.find("\"seq\": 3");
    REQUIRE(pos != std::string::npos);
    std::string bad = good;
    bad[pos + 7] = '8';
    write_all(newest, bad);
  }
  auto back = store.load("tiny");
  REQUIRE(back);
  CHECK(back->record.checkpoint_step == 3);
  REQUIRE(back->rejected.size() == 1);
  CHECK(back->rejected[0].find("record.1.json") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("job store reports every reason when no record verifies", "[unit][job_store]") {
  const auto dir = store_dir("allbad");
  job_store store(baton::os::env::default_env(), dir);
  REQUIRE(store.open());
  auto r = store.create(two_layer_spec("tiny"), 10, std::string("tiny"));
  REQUIRE(r);
  REQUIRE(store.save(*r));
  write_all(store.job_dir("tiny") / "record.0.json", "{}");
  write_all(store.job_dir("tiny") / "record.1.json", "not json");
  auto back = store.load("tiny");
  REQUIRE_FALSE(back);
  const auto& m = back.error().message;
  CHECK(m.find("no record verifies") != std::string::npos);
  CHECK(m.find("record.0.json: seq: expected an integer") != std::string::npos);
  CHECK(m.find("record.1.json: not valid JSON") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("job store save failures keep the previous record and its generation",
          "[unit][job_store]") {
  using op = baton::os::fault_env::op;
  const auto dir = store_dir("faults");
  baton::os::fault_env e(baton::os::env::default_env());
  job_store store(e, dir);
  REQUIRE(store.open());
  auto r = store.create(two_layer_spec("tiny"), 10, std::string("tiny"));
  REQUIRE(r);
  r->checkpoint_step = 3;
  REQUIRE(store.save(*r));  // both slots now hold a good record
  const auto slot0 = store.job_dir("tiny") / "record.0.json";
  const auto slot1 = store.job_dir("tiny") / "record.1.json";
  const std::string before0 = read_all(slot0);
  const std::string before1 = read_all(slot1);
  const auto seq = r->seq;

  const char* message = GENERATE("No space left on device", "Input/output error");
  const op kind = GENERATE(op::append, op::sync);
  const bool persistent = GENERATE(false, true);
  CAPTURE(message, baton::os::fault_env::to_string(kind), persistent);
  e.fail_at(1, message, persistent, kind);
  for (int attempt = 0; attempt < (persistent ? 3 : 1); ++attempt) {
    r->checkpoint_step = 9 + attempt;
    auto s = store.save(*r);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().message, Catch::Contains(message));
    CHECK(r->seq == seq);  // the generation on disk did not move
    CHECK(read_all(slot0) == before0);
    CHECK(read_all(slot1) == before1);
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(store.job_dir("tiny"))) {
      if (f.is_regular_file()) files.push_back(f.path().filename().string());
    }
    std::sort(files.begin(), files.end());
    CHECK(files == std::vector<std::string>{"record.0.json", "record.1.json", "spec.json"});
    auto back = store.load("tiny");
    REQUIRE(back);
    CHECK(back->record.checkpoint_step == 3);
    CHECK(back->rejected.empty());
  }
  // The fault clears: a save redoes the whole write (a failed fsync is never retried on its
  // own, the data it covered may be gone) and lands.
  e.disarm();
  const auto opens = e.op_count(op::new_writable_file);
  const auto appends = e.op_count(op::append);
  r->checkpoint_step = 20;
  REQUIRE(store.save(*r));
  CHECK(e.op_count(op::new_writable_file) == opens + 1);
  CHECK(e.op_count(op::append) == appends + 1);
  CHECK(r->seq == seq + 1);
  auto back = store.load("tiny");
  REQUIRE(back);
  CHECK(back->record.checkpoint_step == 20);
  CHECK(back->record.seq == seq + 1);
  fs::remove_all(dir);
}

TEST_CASE("a create is durable before it returns: the jobs folder is synced last",
          "[unit][job_store]") {
  // An acknowledged submit must survive a crash: spec and record fsynced, the job's folder
  // synced (by the record's write), and jobs/ synced so the new folder's entry is on disk too.
  using op = baton::os::fault_env::op;
  const auto dir = store_dir("durable");
  baton::os::fault_env e(baton::os::env::default_env());
  job_store store(e, dir);
  REQUIRE(store.open());
  const auto before = e.op_count(op::sync_dir);
  REQUIRE(store.create(two_layer_spec("d"), 10));
  const auto syncs = e.op_count(op::sync_dir) - before;
  REQUIRE(syncs >= 3);  // spec's folder, record's folder, jobs/
  std::vector<fs::path> synced;
  e.call_at(
      syncs, [&](op, const fs::path& p) { synced.push_back(p); }, op::sync_dir);
  auto r = store.create(two_layer_spec("d"), 10);
  REQUIRE(r);
  REQUIRE(synced.size() == 1);
  CHECK(synced[0] == dir / "jobs");
  // A failed sync of jobs/ fails the create: nothing is acknowledged that might not be there.
  e.fail_at(syncs, "Input/output error", false, op::sync_dir);
  auto failed = store.create(two_layer_spec("d"), 10);
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error().message, Catch::Contains("Input/output error"));
  fs::remove_all(dir);
}

TEST_CASE("a create cut short leaves a folder that sweep_incomplete removes", "[unit][job_store]") {
  // A daemon killed mid-submit once left a folder with a spec and no record: the next daemon
  // listed it as a failed job with an unreadable record, though nobody was ever told it existed.
  using op = baton::os::fault_env::op;
  const auto dir = store_dir("sweep");
  baton::os::fault_env e(baton::os::env::default_env());
  job_store store(e, dir);
  REQUIRE(store.open());
  REQUIRE(store.create(two_layer_spec("kept"), 10));
  // Crash at the record's rename: spec written, record never in place.
  e.call_at(
      2, [](op, const fs::path&) { throw std::runtime_error("crash"); }, op::rename_file);
  CHECK_THROWS(store.create(two_layer_spec("half"), 10));
  e.disarm();
  REQUIRE(fs::exists(store.spec_path("half-1")));
  fs::create_directories(store.job_dir("empty-1"));  // cut short even earlier
  fs::create_directories(dir / "jobs" / ".hidden");  // not a job id: never touched

  job_store next(baton::os::env::default_env(), dir);
  auto removed = next.sweep_incomplete();
  REQUIRE(removed);
  CHECK(*removed == std::vector<std::string>{"empty-1", "half-1"});
  CHECK_FALSE(fs::exists(store.job_dir("half-1")));
  CHECK_FALSE(fs::exists(store.job_dir("empty-1")));
  CHECK(fs::exists(dir / "jobs" / ".hidden"));
  auto ids = next.list();
  REQUIRE(ids);
  CHECK(*ids == std::vector<std::string>{"kept-1"});
  // Never acknowledged, so its id is free again.
  auto again = next.create(two_layer_spec("half"), 10);
  REQUIRE(again);
  CHECK(again->id == "half-1");
  auto none = next.sweep_incomplete();
  REQUIRE(none);
  CHECK(none->empty());
  fs::remove_all(dir);
}

TEST_CASE("sweep_temp_files removes what record writes cut short left in job folders",
          "[unit][job_store]") {
  using op = baton::os::fault_env::op;
  const auto dir = store_dir("temps");
  baton::os::fault_env e(baton::os::env::default_env());
  job_store store(e, dir);
  REQUIRE(store.open());
  auto r = store.create(two_layer_spec("tiny"), 10, std::string("tiny"));
  REQUIRE(r);
  // A crash between the temp file's sync and its rename: the temp file stays.
  e.call_at(
      1, [](op, const fs::path&) { throw std::runtime_error("crash"); }, op::rename_file);
  CHECK_THROWS(store.save(*r));
  e.disarm();
  auto left = [&] {
    int n = 0;
    for (const auto& d : fs::directory_iterator(store.job_dir("tiny"))) {
      n += d.path().filename().string().find(".tmp-") != std::string::npos;
    }
    return n;
  };
  REQUIRE(left() == 1);
  fs::create_directories(store.checkpoint_dir("tiny"));
  write_all(store.checkpoint_dir("tiny") / "ckpt-000000000001.safetensors.tmp-py1", "x");

  job_store next(baton::os::env::default_env(), dir);
  auto removed = next.sweep_temp_files();
  REQUIRE(removed);
  CHECK(*removed == 1);
  CHECK(left() == 0);
  // The checkpoint folder is checkpoint_store's to sweep (the runner does, before a worker).
  CHECK(fs::exists(store.checkpoint_dir("tiny") / "ckpt-000000000001.safetensors.tmp-py1"));
  auto back = next.load("tiny");
  REQUIRE(back);
  CHECK(back->rejected.empty());
  fs::remove_all(dir);
}
