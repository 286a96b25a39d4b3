// Command workers that attack the daemon (tests/integration/workers/hostile_worker.py), one per
// attack of issue 12: what they announce as a checkpoint (a FIFO, a symlink to /dev/zero, a
// 1.5 GiB sparse file, a symlink out of the state dir) must not block, crash or bloat the daemon,
// and how they end (a fake `done`, a string step, an empty shard, exit 2, a full disk) must not
// end the job as a false success or a respawn loop. Throughout each attack a `baton status` is
// polled and must answer within 1 s.
#include <sys/mount.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_process.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using baton::test::daemon_process;
using baton::test::read_text;
using baton::test::run_baton;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace hostile_worker_test {

const std::string python = "/usr/bin/python3";
const std::string worker_py =
    std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/hostile_worker.py";
constexpr int total_steps = 48;  // 512 samples / batch 32 * 3 epochs; shards of 16 steps

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-hostile-" + name);
}

fs::path write_job(const fs::path& dir, const std::string& name, const std::string& attack,
                   bool first_only) {
  std::vector<std::string> command = {python,     worker_py,
                                      "--attack", attack,
                                      "--total",  std::to_string(total_steps),
                                      "--trace",  (dir / (name + ".trace")).string()};
  if (first_only) command.push_back("--first-only");
  const json job = {
      {"name", name},
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
      {"worker", {{"command", command}, {"stall_timeout_ms", 20000}}},
  };
  const auto path = dir / (name + ".json");
  std::ofstream(path) << job.dump(2);
  return path;
}

struct attack_result {
  std::string id;
  json status;
  double slowest_status_s = 0;
  int polls = 0;
};

// Submits the job and polls `baton status` (timing every answer) until the job is in one of
// `until` or `limit` passes.
attack_result poll_job(daemon_process& d, const fs::path& dir, const std::string& id,
                       const std::set<std::string>& until, std::chrono::seconds limit = 90s) {
  attack_result r;
  r.id = id;
  const auto err = dir / "client.err";
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    auto st = run_baton({"status", id, "--json", "--socket", d.socket().string()}, err, 5s);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.slowest_status_s = std::max(r.slowest_status_s, took);
    ++r.polls;
    INFO("baton status: " << read_text(err) << "\ndaemon log:\n" << d.log());
    REQUIRE(st.code == 0);
    r.status = json::parse(st.out);
    if (until.count(r.status.at("state").get<std::string>())) return r;
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL("job " << id << " did not end in time: " << r.status.dump() << "\n" << d.log());
    }
    std::this_thread::sleep_for(100ms);
  }
}

attack_result attack(daemon_process& d, const fs::path& dir, const std::string& name,
                     const std::string& mode, bool first_only,
                     const std::set<std::string>& until = {"completed", "failed", "cancelled",
                                                           "paused"}) {
  const auto job = write_job(dir, name, mode, first_only);
  auto sub =
      run_baton({"submit", job.string(), "--socket", d.socket().string()}, dir / "client.err");
  REQUIRE(sub.code == 0);
  std::string id = sub.out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return poll_job(d, dir, id, until);
}

std::vector<json> trace_of(const fs::path& dir, const std::string& name) {
  std::vector<json> out;
  std::ifstream in(dir / (name + ".trace"));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// Peak resident set of a process (VmHWM), in bytes.
std::uint64_t peak_rss(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

fs::path checkpoint_dir(const fs::path& dir, const std::string& id) {
  return dir / "state" / "jobs" / id / "checkpoints";
}

std::vector<std::string> names_in(const fs::path& d) {
  std::vector<std::string> out;
  if (!fs::exists(d)) return out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_CASE("checkpoint attacks neither block, crash nor bloat the daemon, and are never resumed",
          "[integration][hostile]") {
  struct file_attack {
    std::string mode;
    std::string reason;  // in the first shard's detail
  };
  const std::vector<file_attack> attacks = {
      {"fifo", "a special file (FIFO, socket or device), not a regular file"},
      {"dev-zero", "a symlink, not a regular file (links are not followed)"},
      {"sparse", "1610612736 bytes, larger than the cap of 1073741824 bytes"},
      {"symlink-out", "a symlink, not a regular file (links are not followed)"},
  };
  const auto dir = scratch("files");
  daemon_process d(dir);
  for (const auto& a : attacks) {
    INFO(a.mode);
    // The first worker attacks; once it is killed the next ones train honestly.
    auto r = attack(d, dir, "f-" + a.mode, a.mode, true);
    INFO(r.status.dump() << "\n" << d.log());
    CHECK(r.slowest_status_s < 1.0);
    CHECK(r.polls >= 2);
    CHECK(r.status.at("state") == "completed");
    CHECK(r.status.at("checkpoint_step") == total_steps);
    const auto& shards = r.status.at("shards");
    REQUIRE(shards.size() >= 2);
    CHECK(shards[0].at("cause") == "crashed");
    CHECK_THAT(shards[0].at("detail").get<std::string>(),
               Catch::Contains("invalid checkpoint") && Catch::Contains(a.reason));
    // Moved aside, with its reason; never in the folder a worker resumes from.
    const auto ckpts = checkpoint_dir(dir, r.id);
    const auto rejected = names_in(ckpts / "rejected");
    CHECK(rejected == std::vector<std::string>{"ckpt-000000000016.safetensors",
                                               "ckpt-000000000016.safetensors.reason"});
    CHECK_THAT(read_text(ckpts / "rejected" / "ckpt-000000000016.safetensors.reason"),
               Catch::Contains(a.reason));
    const auto trace = trace_of(dir, "f-" + a.mode);
    REQUIRE(trace.size() >= 2);
    CHECK(trace[1].at("resume_from").is_null());  // the worker after the attack starts over
    // The final checkpoint is a sealed folder the record really points at.
    const auto path = r.status.at("checkpoint_path").get<std::string>();
    CHECK(fs::is_directory(path));
    CHECK(fs::path(path).parent_path() == ckpts);
  }
  // The symlink's target outside the state dir is untouched.
  CHECK(fs::exists(dir / "outside" / "stolen.safetensors"));
  // Nothing was read into memory: the daemon never came near the sparse file's 1.5 GiB.
  CHECK(peak_rss(d.pid()) < (200ull << 20));
}

TEST_CASE("a fake done, a string step, an empty shard and exit 2 end honestly",
          "[integration][hostile]") {
  const auto dir = scratch("outcomes");
  daemon_process d(dir);
  const auto err = dir / "client.err";

  SECTION("done with job_complete and no checkpoint fails the job, and wait says so") {
    auto r = attack(d, dir, "fake-done", "fake-done", false);
    CHECK(r.slowest_status_s < 1.0);
    CHECK(r.status.at("state") == "failed");
    CHECK_THAT(r.status.at("diagnosis").get<std::string>(),
               Catch::Contains("the worker said the job is complete at step 48, but the newest "
                               "verified checkpoint is at step 0 of 48"));
    CHECK(r.status.at("shards").size() == 1);
    auto wait = run_baton({"wait", r.id, "--socket", d.socket().string()}, err);
    CHECK(wait.code == 1);
  }
  SECTION("a checkpoint line with \"step\":\"40\" is a protocol violation") {
    auto r = attack(d, dir, "bad-step", "bad-step", false);
    CHECK(r.slowest_status_s < 1.0);
    CHECK(r.status.at("state") == "failed");
    CHECK(r.status.at("diagnosis") ==
          "protocol violation: checkpoint.step: expected an integer, got string");
    CHECK(r.status.at("shards").size() == 1);
    CHECK(r.status.at("checkpoint_path") == "");
  }
  SECTION("shards without progress fail after max_failures, not every second forever") {
    const auto start = std::chrono::steady_clock::now();
    auto r = attack(d, dir, "empty", "empty-shard", false);
    CHECK(r.slowest_status_s < 1.0);
    CHECK(r.status.at("state") == "failed");
    CHECK_THAT(r.status.at("diagnosis").get<std::string>(),
               Catch::StartsWith("ended its shard without a new checkpoint 3 times at step 0"));
    CHECK(r.status.at("shards").size() == 3);
    CHECK(std::chrono::steady_clock::now() - start < 30s);
  }
  SECTION("exit 2 fails at once in the worker's own words; resume takes the failed job") {
    auto r = attack(d, dir, "exit2", "exit-2", true);
    CHECK(r.slowest_status_s < 1.0);
    CHECK(r.status.at("state") == "failed");
    CHECK(r.status.at("diagnosis") ==
          "exit code 2: bad data: column 3 of train.csv is not a number");
    CHECK(r.status.at("shards").size() == 1);
    auto resumed = run_baton({"resume", r.id, "--socket", d.socket().string()}, err);
    INFO(read_text(err));
    REQUIRE(resumed.code == 0);
    auto again = poll_job(d, dir, r.id, {"completed", "failed"});
    CHECK(again.slowest_status_s < 1.0);
    CHECK(again.status.at("state") == "completed");
    CHECK(again.status.at("checkpoint_step") == total_steps);
  }
}

// A small tmpfs mounted on `dir` for the life of the object, if this machine lets us mount one.
struct small_tmpfs {
  fs::path dir;
  bool mounted = false;
  small_tmpfs(fs::path d, const std::string& size) : dir(std::move(d)) {
    fs::create_directories(dir);
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~small_tmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

TEST_CASE("a full disk in the worker's checkpoint write pauses the job, and resume finishes it",
          "[integration][hostile]") {
  const auto dir = scratch("enospc");
  // A real full disk when this machine lets us mount a 16 MiB tmpfs as the state dir (root in a
  // container usually may); otherwise the worker reports the same OSError without one.
  small_tmpfs disk(dir / "state", "16m");
  const std::string mode = disk.mounted ? "enospc" : "enospc-line";
  INFO("attack: " << mode << (disk.mounted ? " (16 MiB tmpfs state dir)" : " (injected line)"));
  daemon_process d(dir);
  auto r = attack(d, dir, "full", mode, true);
  INFO(r.status.dump() << "\n" << d.log());
  CHECK(r.slowest_status_s < 1.0);
  CHECK(r.status.at("state") == "paused");
  CHECK_THAT(r.status.at("diagnosis").get<std::string>(),
             Catch::StartsWith("disk full: ") && Catch::Contains("No space left on device"));
  // The space the worker filled is the staging folder's, removed with the worker.
  auto resumed = run_baton({"resume", r.id, "--socket", d.socket().string()}, dir / "client.err");
  REQUIRE(resumed.code == 0);
  auto again = poll_job(d, dir, r.id, {"completed", "failed", "paused"});
  CHECK(again.slowest_status_s < 1.0);
  CHECK(again.status.at("state") == "completed");
  CHECK(again.status.at("checkpoint_step") == total_steps);
}

}  // namespace hostile_worker_test
