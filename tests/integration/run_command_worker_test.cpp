// `baton run` end to end with a command worker whose job has no data, model or training section,
// only `params`, and which shares stdout between the protocol and a trainer's chatter: '\r'
// progress bars (one right before hello, without a newline), Keras-style bars on the same line
// as progress messages, and print() text with braces that are not JSON.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace run_command_worker_test {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-run-cmd-" + name);
}

using baton::test::python;

// Only name, worker.command, shard, memory and params: the worker knows the rest.
json chatty_job(const std::string& name, int total_steps, int steps_per_epoch) {
  return {{"name", name},
          {"worker",
           {{"command",
             {python(),
              std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/chatty_worker.py"}}}},
          {"shard", {{"steps", 7}}},
          {"memory", {{"poll_ms", 50}}},
          {"params",
           {{"total_steps", total_steps},
            {"steps_per_epoch", steps_per_epoch},
            {"dataset", "toy"},
            {"lr", 0.1}}}};
}

fs::path write_job(const fs::path& dir, const json& job) {
  fs::create_directories(dir);
  const auto path = dir / "job.json";
  std::ofstream(path) << job.dump(2);
  return path;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct run_outcome {
  baton::os::exit_status status;
  std::string out;
};

run_outcome baton_run(const fs::path& job, const fs::path& state, bool as_json) {
  std::vector<std::string> argv = {BATON_EXE, "run", job.string(), "--state-dir", state.string()};
  if (as_json) argv.push_back("--json");
  auto r = baton::test::run_process(argv, {}, state.parent_path() / "baton.stderr");
  REQUIRE_FALSE(r.timed_out);
  return {r.status, r.out};
}

TEST_CASE("a chatty command worker loses no protocol line and its text reaches the job log",
          "[integration][command_worker]") {
  const auto dir = scratch("chatty");
  const auto r = baton_run(write_job(dir, chatty_job("chatty", 20, 6)), dir / "state", true);
  INFO(r.out);
  INFO(read_text(dir / "baton.stderr"));
  CHECK(r.status == baton::os::exit_status::exited(0));
  const json summary = json::parse(r.out);
  CHECK(summary["state"] == "completed");
  // Shards of 7 steps: 7, 14, 20. A lost hello, checkpoint or done line would show as a stall, a
  // crash or a checkpoint behind the end.
  CHECK(summary["checkpoint_step"] == 20);
  CHECK(summary["total_steps"] == 20);
  CHECK(summary["exits_by_cause"] == json{{"completed", 3}});
  CHECK(summary["shards"].size() == 3);

  const std::string log = read_text(dir / "state" / "jobs" / "chatty" / "worker.log");
  INFO(log);
  // The text before each message is kept; the messages themselves are read, never logged.
  CHECK_THAT(log, Catch::Contains("loading dataset toy [====================>] 100% \n"));
  CHECK_THAT(log, Catch::Contains("loading dataset toy [======>..............]  33%\n"));
  CHECK_THAT(log, Catch::Contains(R"(chatty worker: params {"dataset": "toy", "lr": 0.1, )"
                                  R"("steps_per_epoch": 6, "total_steps": 20})"));
  CHECK_THAT(log, Catch::Contains("config {'lr': 0.1} (a brace that is not JSON)\n"));
  CHECK_THAT(log, Catch::Contains("Epoch 2/3\n"));
  CHECK_THAT(log, Catch::Contains("2/6 [======>..............]  33% - ETA: 0s - loss: 0.5000\n"));
  CHECK_THAT(log, Catch::Contains("resuming at step 14, shard ends at 20\n"));
  CHECK_THAT(log, Catch::Contains("shard done at step 20\n"));
  CHECK_THAT(log, !Catch::Contains("\"type\""));
  CHECK_THAT(log, !Catch::Contains("\r"));
  fs::remove_all(dir);
}

TEST_CASE("a job with only params completes with the total steps its worker reports",
          "[integration][command_worker]") {
  const auto dir = scratch("params");
  // Shards in epochs without a training section: the worker gets BATON_SHARD_EPOCHS and knows
  // its own epoch length (4 steps), so shards end at steps 4, 8 and 9.
  auto doc = chatty_job("params-only", 9, 4);
  doc["shard"] = {{"epochs", 1}};
  const auto r = baton_run(write_job(dir, doc), dir / "state", false);
  INFO(r.out);
  INFO(read_text(dir / "baton.stderr"));
  CHECK(r.status == baton::os::exit_status::exited(0));
  CHECK_THAT(r.out, Catch::Contains("job params-only: completed after "));
  CHECK_THAT(r.out, Catch::Contains(", step 9/9, 3 workers"));

  // The normalised spec the worker read keeps params verbatim and adds no trainer sections.
  const json spec = json::parse(read_text(dir / "state" / "jobs" / "params-only" / "spec.json"));
  CHECK(spec["params"] == doc["params"]);
  CHECK_FALSE(spec.contains("data"));
  CHECK_FALSE(spec.contains("model"));
  CHECK_FALSE(spec.contains("training"));

  fs::remove_all(dir);
}

TEST_CASE("the built-in trainer refuses a job without its sections, naming them",
          "[integration][command_worker]") {
  const auto dir = scratch("builtin");
  const auto job = write_job(dir, chatty_job("no-sections", 9, 4));
  auto r = baton::test::run_process(
      {BATON_WORKER_EXE, "--job", job.string(), "--checkpoint-dir", (dir / "ckpt").string()}, {},
      dir / "worker.stderr");
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == baton::os::exit_status::exited(2));
  CHECK_THAT(r.out, Catch::Contains(R"("type":"error")") &&
                        Catch::Contains("data: missing; the built-in trainer needs it") &&
                        Catch::Contains("training: missing; the built-in trainer needs it"));
  fs::remove_all(dir);
}

TEST_CASE("a worker whose script is missing: run shows the log's path and python's error",
          "[integration][command_worker]") {
  const auto dir = scratch("missing");
  const json doc = {{"name", "missing"},
                    {"worker", {{"command", {python(), "/nonexistent.py"}}}},
                    {"shard", {{"steps", 5}}},
                    {"restart", {{"max_failures", 1}}},
                    {"params", {{"total_steps", 5}}}};
  const auto job = write_job(dir, doc);
  const auto log = dir / "state" / "jobs" / "missing" / "worker.log";
  const auto text = baton_run(job, dir / "state", false);
  INFO(text.out);
  INFO(read_text(dir / "baton.stderr"));
  CHECK(text.status == baton::os::exit_status::exited(1));
  CHECK_THAT(text.out, Catch::Contains("ended: crashed (exit code 2") &&
                           Catch::Contains("no checkpoint yet; its output: " + log.string()));
  // The worker's own last line, under the event, as the log has it.
  CHECK_THAT(text.out,
             Catch::Contains(log.string() + "\n  | ") &&
                 Catch::Contains("'/nonexistent.py': [Errno 2] No such file or directory\n"));
  CHECK_THAT(text.out, Catch::Contains("job missing: failed"));

  fs::remove_all(dir / "state");
  const auto r = baton_run(job, dir / "state", true);
  INFO(r.out);
  const json summary = json::parse(r.out);
  CHECK(summary["state"] == "failed");
  CHECK(summary["log_path"] == log.string());
  REQUIRE(summary["log_tail"].is_array());
  CHECK(summary["log_tail"].size() <= 5);
  CHECK_THAT(summary["log_tail"].back().get<std::string>(),
             Catch::Contains("No such file or directory"));
  fs::remove_all(dir);
}

}  // namespace run_command_worker_test
