// job_runner on a os::mem_env (under a os::fault_env) with fake workers: the runner's side of the
// job machine's decisions, with no process and no disk. The real-worker versions are in
// job_runner_test.cpp.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "os/fault_env.h"
#include "os/mem_env.h"
#include "protocol/job_spec.h"
#include "supervisor/job_runner.h"
#include "support/fake_launcher.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// "/mem" on POSIX, "C:\\mem" on Windows: load_job_spec makes the job file's path absolute.
std::filesystem::path mem_root() { return baton::test::abs_path("/mem"); }

baton::protocol::job_spec spec_of(baton::os::mem_env& e) {
  const json doc = {
      {"name", "j"},
      {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 64},
        {"epochs", 2}}},
      {"shard", {{"epochs", 2}}},
      {"memory", {{"poll_ms", 10}}},
      {"worker", {{"command", {"fake-trainer"}}}}};
  REQUIRE(e.create_dirs(mem_root()));
  REQUIRE(e.put(mem_root() / "job.json", doc.dump()));
  auto spec = baton::protocol::load_job_spec(e, mem_root() / "job.json");
  REQUIRE(spec);
  return *spec;
}

bool run_to_rest(boost::asio::io_context& io, job_runner& r) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!r.at_rest() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(5ms);
  }
  return r.at_rest();
}

}  // namespace

TEST_CASE("a failed record save pauses the job with the reason, and resume finishes it",
          "[unit][job_runner]") {
  using op = baton::os::fault_env::op;
  baton::os::mem_env files;
  const auto spec = spec_of(files);
  baton::os::fault_env fe(files);
  job_store store(fe, mem_root() / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 16, "j");
  REQUIRE(created);

  baton::test::fake_launcher launcher;
  baton::test::fake_trainer trainer;
  trainer.files = &files;  // the worker's own writes do not go through the failing env
  launcher.script = trainer.script();
  // Every rename fails: the record's atomic replace, never a log append.
  fe.fail_at(1, "No space left on device", true, op::rename_file);

  boost::asio::io_context io;
  runner_options ro;
  job_runner runner(io, fe, launcher, store, *created, spec, ro);
  runner.start();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::paused);
  CHECK_THAT(runner.record().diagnosis, Catch::StartsWith("disk full: "));
  CHECK_THAT(runner.record().diagnosis, Catch::Contains("No space left on device"));
  REQUIRE(launcher.workers.size() == 1);
  CHECK(launcher.workers[0]->stop_received());  // asked to checkpoint, not killed
  CHECK_FALSE(launcher.workers[0]->killed());
  // The pause is in the job's log, written through the env.
  auto log = files.read_file(store.log_path("j"));
  REQUIRE(log);
  CHECK_THAT(*log, Catch::Contains("[baton] job paused: disk full: "));

  fe.disarm();
  runner.resume();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::completed);
  CHECK(runner.record().checkpoint_step == 16);
  auto back = store.load("j");
  REQUIRE(back);
  CHECK(back->record.state == job_state::completed);
}

TEST_CASE("a worker that breaks the protocol is killed as a protocol violation",
          "[unit][job_runner]") {
  baton::os::mem_env files;
  auto spec = spec_of(files);
  spec.restart.max_failures = 1;
  job_store store(files, mem_root() / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 16, "j");
  REQUIRE(created);
  baton::test::fake_launcher launcher;
  launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{99, p.pid(), "from the future"});
  };
  boost::asio::io_context io;
  job_runner runner(io, files, launcher, store, *created, spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::failed);
  REQUIRE(runner.record().shards.size() == 1);
  CHECK(runner.record().shards[0].cause == exit_cause::crashed);
  CHECK_THAT(runner.record().shards[0].detail, Catch::StartsWith("protocol violation: "));
  CHECK(launcher.workers[0]->killed());
}
