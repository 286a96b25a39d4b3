// Folder checkpoints end to end: `baton run` with a real Python command worker
// (tests/integration/workers/folder_worker.py) that writes each checkpoint as a folder into
// BATON_STAGING_DIR, bad announcements of every kind, and the hand checks protocol/README.md
// documents (`baton checkpoint verify` and its Python snippet).
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "os/env.h"
#include "protocol/checkpoint_folder.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace folder_checkpoint_test {

const std::string python = "/usr/bin/python3";
const std::string worker_py =
    std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/folder_worker.py";
constexpr int total_steps = 48;  // 512 samples / batch 32 * 3 epochs, as the spec says

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path write_job(const fs::path& dir, const std::vector<std::string>& extra_args) {
  std::vector<std::string> command = {
      python,    worker_py, "--total", std::to_string(total_steps),
      "--every", "8",       "--trace", (dir / "trace.jsonl").string()};
  command.insert(command.end(), extra_args.begin(), extra_args.end());
  const json job = {
      {"name", "folders"},
      {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 4}, {"seed", 1}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"loss", "binary_crossentropy"},
        {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
        {"batch_size", 32},
        {"epochs", 3}}},
      {"shard", {{"steps", 16}}},
      {"checkpoints", {{"keep", 2}}},
      {"restart", {{"max_failures", 3}, {"backoff_initial_ms", 50}, {"backoff_max_ms", 50}}},
      {"worker", {{"command", command}}},
  };
  const auto path = dir / "job.json";
  std::ofstream(path) << job.dump(2);
  return path;
}

struct outcome {
  baton::os::exit_status status;
  json summary;
  std::vector<json> trace;  // one line per worker
  std::string log;          // the job's log
  fs::path ckpt_dir;
};

outcome run_job(const fs::path& dir, const std::vector<std::string>& extra_args = {}) {
  const auto job = write_job(dir, extra_args);
  const auto state = dir / "state";
  auto r = baton::test::run_process(
      {BATON_EXE, "run", job.string(), "--state-dir", state.string(), "--json"}, {},
      dir / "baton.stderr");
  REQUIRE_FALSE(r.timed_out);
  INFO(r.out);
  outcome o{r.status, json::parse(r.out), {}, {}, state / "jobs" / "folders" / "checkpoints"};
  std::ifstream trace(dir / "trace.jsonl");
  for (std::string line; std::getline(trace, line);) o.trace.push_back(json::parse(line));
  o.log = slurp(state / "jobs" / "folders" / "worker.log");
  return o;
}

std::string folder_for(const fs::path& ckpt_dir, std::int64_t step) {
  return (ckpt_dir / baton::protocol::folder_name_for_step(step)).string();
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The ```python block after the marker in protocol/README.md: the snippet users are told to run.
fs::path readme_snippet(const fs::path& dir) {
  const auto readme = slurp(std::string(BATON_SOURCE_DIR) + "/protocol/README.md");
  const auto marker = readme.find("<!-- folder-check-snippet -->");
  REQUIRE(marker != std::string::npos);
  const auto start = readme.find("```python\n", marker);
  REQUIRE(start != std::string::npos);
  const auto end = readme.find("```", start + 10);
  REQUIRE(end != std::string::npos);
  const auto path = dir / "check_folder.py";
  std::ofstream(path) << readme.substr(start + 10, end - start - 10);
  return path;
}

TEST_CASE("a folder-checkpoint worker completes over several shards, resuming from sealed folders",
          "[integration][folder_checkpoint]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-folder-good");
  const auto o = run_job(dir);
  INFO(o.log);
  CHECK(o.status == baton::os::exit_status::exited(0));
  CHECK(o.summary["state"] == "completed");
  CHECK(o.summary["checkpoint_step"] == total_steps);
  CHECK(o.summary["checkpoint_path"] == folder_for(o.ckpt_dir, total_steps));

  REQUIRE(o.trace.size() == 3);  // shards of 16 steps
  for (std::size_t i = 0; i < o.trace.size(); ++i) {
    INFO("worker " << i);
    const auto& t = o.trace[i];
    CHECK(t["shard"] == i);
    CHECK(t["staging"] == (o.ckpt_dir / (".staging-" + std::to_string(i))).string());
    CHECK(t["staging_empty"] == true);
    if (i == 0) {
      CHECK(t["resume_from"].is_null());
    } else {
      CHECK(t["resume_from"] == folder_for(o.ckpt_dir, 16 * static_cast<std::int64_t>(i)));
      CHECK(t["step"] == 16 * i);
    }
  }
  // keep = 2 across folders; no staging folder outlives its worker.
  CHECK(entries(o.ckpt_dir) == std::vector<std::string>{"ckpt-000000000040", "ckpt-000000000048"});
  CHECK(baton::protocol::verify_checkpoint_folder(baton::os::env::default_env(),
                                                  folder_for(o.ckpt_dir, 48)));
  fs::remove_all(dir);
}

TEST_CASE("`baton checkpoint verify` and the README's Python snippet check a sealed folder",
          "[integration][folder_checkpoint]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-folder-hand");
  const auto o = run_job(dir);
  REQUIRE(o.summary["state"] == "completed");
  const auto folder = folder_for(o.ckpt_dir, 48);

  auto cli = baton::test::run_process({BATON_EXE, "checkpoint", "verify", folder});
  CHECK(cli.status == baton::os::exit_status::exited(0));
  CHECK(cli.out == "OK " + folder + ": step 48\n");
  const auto snippet = readme_snippet(dir);
  auto py = baton::test::run_process({python, snippet.string(), folder});
  CHECK(py.status == baton::os::exit_status::exited(0));
  CHECK(py.out == "OK " + folder + " step 48\n");

  // Both must also fail: a flipped byte, then an extra file.
  const auto victim = fs::path(folder) / "sub" / "weights.bin";
  auto bytes = slurp(victim);
  bytes[100] ^= 1;
  std::ofstream(victim, std::ios::binary) << bytes;
  cli =
      baton::test::run_process({BATON_EXE, "checkpoint", "verify", folder}, {}, dir / "cli.stderr");
  CHECK(cli.status == baton::os::exit_status::exited(1));
  CHECK_THAT(slurp(dir / "cli.stderr"),
             Catch::Contains(victim.string() + ": content hashes to xxh64"));
  py = baton::test::run_process({python, snippet.string(), folder}, {}, dir / "py.stderr");
  CHECK(py.status != baton::os::exit_status::exited(0));
  CHECK_THAT(slurp(dir / "py.stderr"), Catch::Contains("sub/weights.bin"));
  bytes[100] ^= 1;
  std::ofstream(victim, std::ios::binary) << bytes;
  REQUIRE(baton::test::run_process({python, snippet.string(), folder}).status ==
          baton::os::exit_status::exited(0));
  std::ofstream(fs::path(folder) / "extra.txt") << "x";
  py = baton::test::run_process({python, snippet.string(), folder}, {}, dir / "py2.stderr");
  CHECK(py.status != baton::os::exit_status::exited(0));
  CHECK_THAT(slurp(dir / "py2.stderr"), Catch::Contains("extra.txt"));

  // A file checkpoint path that is missing fails with the reason too.
  cli = baton::test::run_process({BATON_EXE, "checkpoint", "verify", folder + ".nope"}, {},
                                 dir / "cli2.stderr");
  CHECK(cli.status == baton::os::exit_status::exited(1));
  CHECK_THAT(slurp(dir / "cli2.stderr"), Catch::Contains("does not exist"));
  fs::remove_all(dir);
}

TEST_CASE("a bad folder announcement is rejected, the worker killed, the previous checkpoint kept",
          "[integration][folder_checkpoint]") {
  const auto [mode, reason] = GENERATE(table<std::string, std::string>({
      {"outside", "not a folder directly inside the staging folder"},
      {"symlink", "/link: a symlink, not a folder"},
      {"backwards", "step 1 does not advance past the newest verified checkpoint (step 8)"},
      {"inner-symlink", "/sub/escape: a symlink"},
      {"inner-fifo", "/sub/pipe: a special file"},
      {"forged", "/baton-manifest.json: the worker wrote a baton-manifest.json"},
      {"file", "/plain: a file, not a folder"},
  }));
  INFO(mode);
  const auto dir = baton::test::fresh_scratch_dir("baton-folder-bad-" + mode);
  const auto o = run_job(dir, {"--bad", mode});
  INFO(o.log);
  CHECK_THAT(o.log, Catch::Contains("[baton] rejected checkpoint: ") && Catch::Contains(reason));
  // The worker was killed as crashed, and the next one resumed from the last good checkpoint.
  CHECK(o.summary["shards"][0]["cause"] == "crashed");
  CHECK(o.summary["shards"][0]["end_step"] == 8);
  REQUIRE(o.trace.size() >= 2);
  CHECK(o.trace[1]["resume_from"] == folder_for(o.ckpt_dir, 8));
  CHECK(o.summary["state"] == "completed");
  CHECK(o.summary["checkpoint_step"] == total_steps);
  CHECK_FALSE(fs::exists(o.ckpt_dir / "ckpt-000000000009"));
  fs::remove_all(dir);
}

TEST_CASE("a damaged newest folder is skipped before the next spawn, naming the file",
          "[integration][folder_checkpoint]") {
  // The first worker damages its own last sealed folder (ckpt-16) after sealing, before it ends:
  // the next spawn must resume from ckpt-8 and the log must say why ckpt-16 was skipped.
  const auto dir = baton::test::fresh_scratch_dir("baton-folder-damaged");
  const auto o = run_job(dir, {"--damage-last"});
  INFO(o.log);
  const auto damaged = fs::path(folder_for(o.ckpt_dir, 16));
  CHECK_THAT(o.log,
             Catch::Contains("[baton] skipped checkpoint " + (damaged / "state.json").string() +
                             ": missing (listed in the manifest)"));
  REQUIRE(o.trace.size() >= 2);
  CHECK(o.trace[1]["resume_from"] == folder_for(o.ckpt_dir, 8));
  CHECK(o.trace[1]["step"] == 8);
  CHECK(o.summary["shards"][1]["start_step"] == 8);
  CHECK(o.summary["state"] == "completed");
  CHECK(o.summary["checkpoint_step"] == total_steps);
  fs::remove_all(dir);
}

}  // namespace folder_checkpoint_test
