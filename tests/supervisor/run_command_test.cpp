// `baton run` in-process on a os::mem_env with fake workers: what it does with a new job, a paused
// one, one a killed run left running, a finished one, a crash loop and a changed config, and the
// exit code and summary it gives for each. Real workers run it in
// tests/integration/run_builtin_worker_test.cpp.
#include "supervisor/run_command.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "os/mem_env.h"
#include "os/system.h"
#include "protocol/job_spec.h"
#include "supervisor/job_store.h"
#include "support/fake_launcher.h"
#include "support/mem_state_locker.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// "/mem" on POSIX, "C:\\mem" on Windows: load_job_spec makes the job file's path absolute.
std::filesystem::path mem_dir() { return baton::test::abs_path("/mem"); }

// 512 samples in batches of 64 for two epochs, one shard per epoch: 16 steps in 2 workers.
json job_doc(const std::string& name) {
  return {{"name", name},
          {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
          {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
          {"training",
           {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
            {"batch_size", 64},
            {"epochs", 2}}},
          {"shard", {{"epochs", 1}}},
          {"memory", {{"poll_ms", 10}}},
          {"restart", {{"max_failures", 2}, {"backoff_initial_ms", 10}}},
          {"worker", {{"command", {"fake-trainer"}}}}};
}

struct fixture {
  fixture() {
    REQUIRE(files.create_dirs(mem_dir()));
    trainer.files = &files;
    launcher.script = trainer.script();
    write_config(job_doc("j"));
  }

  void write_config(const json& doc) { REQUIRE(files.put(mem_dir() / "job.json", doc.dump())); }

  struct outcome {
    int code;
    json summary;
    std::string err;
  };

  outcome run() {
    std::ostringstream out, err;
    baton::supervisor::cli_context ctx{out, err, files};
    baton::supervisor::run_options o;
    o.config = (mem_dir() / "job.json").string();
    o.state_dir = (mem_dir() / "state").string();
    o.json = true;
    o.become_subreaper = false;
    o.locker = &locker;
    const int code = baton::supervisor::run_job(o, ctx, launcher);
    json summary;
    if (!out.str().empty()) summary = json::parse(out.str(), nullptr, false);
    return {code, summary, err.str()};
  }

  // The job's record as an earlier run left it: `state`, and a worker still open if asked.
  void leave(job_state state, bool open_shard) {
    job_store store(files, mem_dir() / "state");
    REQUIRE(store.open());
    auto spec = baton::protocol::load_job_spec(files, mem_dir() / "job.json");
    REQUIRE(spec);
    auto r = store.create(*spec, 16, "j");
    REQUIRE(r);
    r->state = state;
    if (state == job_state::paused) r->diagnosis = "stopped by the user";
    if (open_shard) {
      shard_record s;
      s.pid = 4242;
      r->shards.push_back(s);
    }
    REQUIRE(store.save(*r));
  }

  baton::os::mem_env files;
  baton::test::fake_launcher launcher;
  baton::test::fake_trainer trainer;
  baton::test::mem_state_locker locker;
};

}  // namespace

TEST_CASE("baton run completes a job in fresh workers and prints the summary", "[unit][run]") {
  fixture f;
  const auto r = f.run();
  INFO(r.err);
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.summary.at("state") == "completed");
  CHECK(r.summary.at("checkpoint_step") == 16);
  CHECK(r.summary.at("shards").size() == 2);
  CHECK(r.summary.at("restarts_by_cause") == json::object());
  CHECK(r.summary.at("exits_by_cause") == json{{"completed", 2}});
  REQUIRE(f.launcher.workers.size() == 2);
  CHECK(f.launcher.workers[1]->env("BATON_START_STEP") == "8");
  // The record on disk is the one the summary shows.
  job_store store(f.files, mem_dir() / "state");
  auto back = store.load("j");
  REQUIRE(back);
  CHECK(back->record.state == job_state::completed);

  // Run again: nothing left to do, said so, no worker started.
  const auto again = f.run();
  CHECK(again.code == baton::supervisor::exit_ok);
  CHECK(again.summary.at("state") == "completed");
  CHECK(f.launcher.workers.size() == 2);
}

TEST_CASE("baton run resumes a paused job (an earlier Ctrl-C)", "[unit][run]") {
  fixture f;
  f.leave(job_state::paused, false);
  const auto r = f.run();
  INFO(r.err);
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.summary.at("state") == "completed");
  CHECK(r.summary.at("diagnosis") == "");
}

TEST_CASE("baton run recovers a job a killed run left running: its shard closed as stopped",
          "[unit][run]") {
  fixture f;
  f.leave(job_state::running, true);
  const auto r = f.run();
  INFO(r.err);
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.summary.at("state") == "completed");
  REQUIRE(r.summary.at("shards").size() == 3);
  CHECK(r.summary["shards"][0]["cause"] == "stopped");
  CHECK(r.summary["shards"][0]["detail"] == "supervisor exited while the worker ran");
  CHECK(r.summary.at("restarts_by_cause") == json{{"stopped", 1}});
}

TEST_CASE("baton run fails a crash-looping job with exit 1 and the diagnosis", "[unit][run]") {
  fixture f;
  f.launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{baton::protocol::protocol_version, p.pid(), "crasher"});
    p.exit(baton::os::exit_status::exited(1));
  };
  const auto r = f.run();
  CHECK(r.code == baton::supervisor::exit_failure);
  CHECK(r.summary.at("state") == "failed");
  CHECK(r.summary.at("diagnosis") == "crashed 2 times at step 0: exit code 1");
  CHECK(r.summary.at("restarts_by_cause") == json{{"crashed", 2}});
}

TEST_CASE("baton run refuses a job whose config changed since its state was made", "[unit][run]") {
  fixture f;
  f.leave(job_state::paused, false);
  auto doc = job_doc("j");
  doc["training"]["epochs"] = 3;
  f.write_config(doc);
  const auto r = f.run();
  CHECK(r.code == baton::supervisor::exit_invalid);
  CHECK_THAT(r.err, Catch::Contains("was started from a different config"));
  CHECK(f.launcher.workers.empty());
}

TEST_CASE("baton run refuses a state directory a daemon owns, naming the daemon's pid",
          "[unit][run]") {
  fixture f;
  auto daemon_lock = f.locker.lock(mem_dir() / "state", "baton serve");
  REQUIRE(daemon_lock);
  const auto r = f.run();
  CHECK(r.code == baton::supervisor::exit_failure);
  CHECK(r.err == "state directory " + (mem_dir() / "state").string() +
                     " is owned by the baton daemon (pid " +
                     std::to_string(baton::os::current_pid()) +
                     "): submit the job to it with `baton submit " +
                     (mem_dir() / "job.json").string() + "`, or stop the daemon first\n");
  CHECK(f.launcher.workers.empty());
  job_store store(f.files, mem_dir() / "state");
  CHECK_FALSE(store.exists("j"));
  // Another run holds it: the generic message, with that run's pid.
  daemon_lock->reset();
  auto run_lock = f.locker.lock(mem_dir() / "state", "baton run");
  REQUIRE(run_lock);
  CHECK_THAT(f.run().err, Catch::Contains("is in use by `baton run` (pid "));
  run_lock->reset();
  // Free again: the run proceeds, and holds the directory only while it runs.
  CHECK(f.run().code == baton::supervisor::exit_ok);
  CHECK_FALSE(f.locker.is_held(mem_dir() / "state"));
}

TEST_CASE("baton run refuses a job past the machine's limits before any worker", "[unit][run]") {
  fixture f;
  json doc = job_doc("j");
  doc["training"]["threads"] = 1'000'000;
  f.write_config(doc);
  const auto r = f.run();
  CHECK(r.code == baton::supervisor::exit_invalid);
  CHECK_THAT(r.err, Catch::StartsWith("training.threads: at most "));
  CHECK(f.launcher.workers.empty());
}
