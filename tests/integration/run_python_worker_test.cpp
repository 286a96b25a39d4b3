// `baton run` end to end with the example Python worker: the supervisor knows it only through
// the protocol, so these tests show recycling, crash loops and exact resume for any trainer.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "os/env.h"
#include "protocol/checkpoint.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace run_python_worker_test {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-run-py-" + name);
}

json example_job() {
  std::ifstream in(std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/job.json");
  return json::parse(in);
}

fs::path write_job(const fs::path& dir, json job) {
  job["worker"]["command"] = {
      "python3", std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/train.py"};
  fs::create_directories(dir);
  const auto path = dir / "job.json";
  std::ofstream(path) << job.dump(2);
  return path;
}

struct run_outcome {
  baton::os::exit_status status;
  json summary;
};

run_outcome baton_run(const fs::path& job, const fs::path& state) {
  auto r = baton::test::run_process(
      {BATON_EXE, "run", job.string(), "--state-dir", state.string(), "--json"}, {},
      state.parent_path() / "baton.stderr");
  REQUIRE_FALSE(r.timed_out);
  INFO(r.out);
  return {r.status, json::parse(r.out)};
}

std::string final_weights(const json& summary) {
  auto bytes =
      baton::os::env::default_env().read_file(summary["checkpoint_path"].get<std::string>());
  REQUIRE(bytes);
  auto c = baton::protocol::decode_checkpoint(*bytes, "final");
  REQUIRE(c);
  std::string all;
  for (const auto& t : c->tensors) all += t.name + ":" + t.bytes;
  return all;
}

TEST_CASE("the Python example worker completes under a soft limit that forces recycles",
          "[integration][python_worker]") {
  const auto dir = scratch("soft");
  const auto r = baton_run(
      std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/job.json", dir / "state");
  CHECK(r.status == baton::os::exit_status::exited(0));
  CHECK(r.summary["state"] == "completed");
  CHECK(r.summary["checkpoint_step"] == 96);
  CHECK(r.summary["restarts_by_cause"].value("memory_soft", 0) >= 1);
  CHECK(r.summary["restarts_by_cause"].value("crashed", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("recycled and hard-killed runs end with the weights of an undisturbed run",
          "[integration][python_worker]") {
  const auto dir = scratch("exact");
  auto calm = example_job();
  calm["debug"]["leak_mib_per_step"] = 0;
  calm["memory"] = {{"poll_ms", 50}};
  const auto calm_run = baton_run(write_job(dir / "calm", calm), dir / "calm-state");
  REQUIRE(calm_run.summary["state"] == "completed");
  REQUIRE(calm_run.summary["exits_by_cause"] == json{{"completed", 2}});  // 3-epoch shards

  // One shard for the whole job and a hard limit it must cross: the first worker is killed, and
  // later workers are stopped early enough, from what the kill taught the supervisor.
  auto hard = example_job();
  hard["shard"] = {{"epochs", 6}};
  hard["debug"]["leak_mib_per_step"] = 3;
  hard["memory"] = {{"hard_limit_mib", 100}, {"poll_ms", 20}};
  const auto hard_run = baton_run(write_job(dir / "hard", hard), dir / "hard-state");
  INFO(hard_run.summary.dump(1));
  CHECK(hard_run.status == baton::os::exit_status::exited(0));
  CHECK(hard_run.summary["state"] == "completed");
  // Samples lag a fast leak, so the first lesson may be a little long and take a second kill.
  CHECK(hard_run.summary["restarts_by_cause"].value("memory_hard", 0) >= 1);
  CHECK(hard_run.summary["restarts_by_cause"].value("memory_hard", 0) <= 3);
  // Later workers stop at the budget the kill taught, before the limit.
  CHECK(hard_run.summary["restarts_by_cause"].value("memory_budget", 0) >= 1);
  const auto& killed = hard_run.summary["shards"][0];
  CHECK(killed["cause"] == "memory_hard");
  CHECK(final_weights(hard_run.summary) == final_weights(calm_run.summary));
  fs::remove_all(dir);
}

TEST_CASE("a crash-looping worker fails the job with a diagnosis", "[integration][python_worker]") {
  const auto dir = scratch("crashloop");
  auto job = example_job();
  job["restart"] = {{"max_failures", 3}, {"backoff_initial_ms", 1000}, {"backoff_max_ms", 1000}};
  auto path = write_job(dir, job);
  auto j = json::parse(std::ifstream(path));
  j["worker"]["command"] = {"python3", "-c",
                            "import sys; print('boom', file=sys.stderr); sys.exit(7)"};
  std::ofstream(path) << j.dump(2);
  const auto r = baton_run(path, dir / "state");
  CHECK(r.status == baton::os::exit_status::exited(1));
  CHECK(r.summary["state"] == "failed");
  CHECK(r.summary["diagnosis"] == "crashed 3 times at step 0: exit code 7: boom");
  CHECK(r.summary["shards"].size() == 3);
  fs::remove_all(dir);
}

}  // namespace run_python_worker_test
