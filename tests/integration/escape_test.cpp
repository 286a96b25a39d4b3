// Processes that try to escape the daemon (issue 12, defect 2): a worker whose child calls
// setsid() and double-forks, holding 150 MiB, with its environment and without (so no BATON_*
// variable gives it away), plus a plain child. Through a recycle, a cancel, a job's end and a
// daemon SIGKILL + restart, no process of the job may be left (checked from /proc), and the
// escapee's memory counts against the job's soft limit, so the worker is recycled. The cgroup
// cases skip where the daemon finds no writable cgroup; the same scenarios also run in the
// process-group fallback (forced by BATON_CONTAINMENT=process-group), where only an escapee that
// kept its environment can be found.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/daemon_process.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using baton::test::daemon_process;
using baton::test::pid_gone;
using baton::test::python;
using baton::test::run_baton;
using baton::test::trim;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace escape_test {

constexpr int escapee_mib = 150;

struct mode {
  const char* name;
  bool fallback;
  bool empty_env;
};

std::vector<std::pair<std::string, std::string>> daemon_env(const mode& m) {
  if (m.fallback) return {{"BATON_CONTAINMENT", "process-group"}};
  return {};
}

// A job of the example Python worker behind escape_worker.py; 8 steps per epoch.
fs::path write_job(const fs::path& dir, const mode& m, int epochs, int shard_epochs,
                   std::optional<int> soft_limit_mib) {
  std::vector<std::string> command = {
      python(), std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/escape_worker.py",
      dir.string(), std::to_string(escapee_mib)};
  if (m.empty_env) command.push_back("empty-env");
  json memory = {{"poll_ms", 50}, {"hard_limit_mib", 2000}};
  if (soft_limit_mib) memory["soft_limit_mib"] = *soft_limit_mib;
  const json doc = {
      {"name", "esc"},
      {"data", {{"type", "synthetic"}, {"samples", 2048}, {"features", 200}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 256},
        {"epochs", epochs}}},
      {"shard", {{"epochs", shard_epochs}}},
      {"memory", memory},
      {"restart", {{"max_failures", 3}, {"backoff_initial_ms", 100}, {"backoff_max_ms", 200}}},
      {"worker", {{"command", command}, {"stop_grace_ms", 3000}}}};
  const auto file = dir / "job.json";
  std::ofstream(file) << doc.dump(2);
  return file;
}

struct noted {
  std::string kind;
  std::int64_t pid = 0;
};

std::vector<noted> read_pids(const fs::path& dir) {
  std::vector<noted> out;
  std::ifstream f(dir / "pids");
  noted n;
  while (f >> n.kind >> n.pid) out.push_back(n);
  return out;
}

std::size_t count(const std::vector<noted>& v, const std::string& kind) {
  std::size_t n = 0;
  for (const auto& e : v) n += e.kind == kind;
  return n;
}

// Waits until `kind` has been noted `n` times.
std::vector<noted> wait_noted(const fs::path& dir, const std::string& kind, std::size_t n,
                              std::chrono::seconds limit = 30s) {
  const auto deadline = clock_type::now() + limit;
  auto v = read_pids(dir);
  while (count(v, kind) < n && clock_type::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    v = read_pids(dir);
  }
  REQUIRE(count(v, kind) >= n);
  return v;
}

// The noted processes still running after `grace`, as "kind pid" lines; kills them so no test
// leaves a stray process on the machine.
std::string survivors(const std::vector<noted>& v, std::chrono::milliseconds grace = 2s) {
  const auto deadline = clock_type::now() + grace;
  std::string left;
  do {
    left.clear();
    for (const auto& e : v) {
      if (!pid_gone(e.pid)) left += e.kind + " " + std::to_string(e.pid) + "\n";
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(20ms);
  } while (clock_type::now() < deadline);
  for (const auto& e : v) {
    if (!pid_gone(e.pid)) ::kill(static_cast<pid_t>(e.pid), SIGKILL);
  }
  return left;
}

fs::path scratch(const std::string& name, const mode& m) {
  return baton::test::fresh_scratch_dir("baton-escape-" + name + "-" + m.name);
}

// Starts the daemon; false when the mode needs cgroups and the daemon found none.
bool start_daemon(std::optional<daemon_process>& d, const fs::path& dir, const mode& m) {
  d.emplace(dir, std::vector<std::string>{}, daemon_env(m));
  auto h = baton::supervisor::control_client::call(d->socket(), "GET", "/v1/health");
  REQUIRE(h);
  const auto got = h->body.at("containment").at("mode").get<std::string>();
  INFO(h->body.dump());
  if (m.fallback) {
    CHECK(got == "process-group");
    return true;
  }
  return got == "cgroup";
}

void recycle_and_end(const mode& m) {
  const auto dir = scratch("recycle", m);
  std::optional<daemon_process> d;
  if (!start_daemon(d, dir, m)) BATON_SKIP("no writable cgroup for the daemon");
  const auto err = dir / "client.err";
  const auto sock = d->socket().string();
  // The worker itself stays far below 80 MiB; only the escapee's 150 MiB can cross it.
  const auto sub =
      run_baton({"submit", write_job(dir, m, 3, 3, 80).string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  // The first worker is recycled for the escapee's memory; by the second worker's escapee, the
  // first one's processes are gone.
  const auto v = wait_noted(dir, "escapee", 2);
  std::vector<noted> first;
  for (const auto& e : v) {
    if (e.kind == "worker" && !first.empty()) break;
    first.push_back(e);
  }
  INFO(d->log());
  CHECK(survivors(first) == "");
  const auto wait = run_baton({"wait", id, "--socket", sock}, err, 120s);
  CHECK(wait.code == 0);
  const auto s = d->status(id);
  INFO(s.dump());
  CHECK(s.at("state") == "completed");
  CHECK(s.at("exits_by_cause").value("memory_soft", 0) >= 1);
  CHECK(s.at("containment") == (m.fallback ? "process-group" : "cgroup"));
  // At the job's end nothing of any of its workers runs.
  CHECK(survivors(read_pids(dir)) == "");
  const auto human = run_baton({"status", id, "--socket", sock}, err);
  CHECK_THAT(human.out, Catch::Contains(std::string("containment: ") +
                                        (m.fallback ? "process-group" : "cgroup")));
}

void cancel(const mode& m) {
  const auto dir = scratch("cancel", m);
  std::optional<daemon_process> d;
  if (!start_daemon(d, dir, m)) BATON_SKIP("no writable cgroup for the daemon");
  const auto err = dir / "client.err";
  const auto sock = d->socket().string();
  const auto sub = run_baton(
      {"submit", write_job(dir, m, 4000, 4000, std::nullopt).string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  wait_noted(dir, "escapee", 1);
  // Counted while it runs: the live memory includes the escapee's.
  d->poll(id, [](const json& s) {
    return s.at("live").is_object() &&
           s.at("live").value("rss_bytes", std::int64_t{0}) >= std::int64_t{escapee_mib} << 20;
  });
  CHECK(run_baton({"cancel", id, "--socket", sock}, err).code == 0);
  d->poll(id, [](const json& s) { return s.at("state") == "cancelled"; });
  INFO(d->log());
  CHECK(survivors(read_pids(dir)) == "");
}

void daemon_kill_and_restart(const mode& m) {
  const auto dir = scratch("restart", m);
  std::vector<noted> v;
  {
    std::optional<daemon_process> d;
    if (!start_daemon(d, dir, m)) BATON_SKIP("no writable cgroup for the daemon");
    const auto err = dir / "client.err";
    const auto sub = run_baton({"submit", write_job(dir, m, 4000, 4000, std::nullopt).string(),
                                "--socket", d->socket().string()},
                               err);
    REQUIRE(sub.code == 0);
    v = wait_noted(dir, "escapee", 1);
    wait_noted(dir, "child", 1);
    v = read_pids(dir);
    d->signal(true);
    REQUIRE(d->wait(5s));
  }
  // The worker dies with the daemon (its death signal); its child and the escapee do not.
  std::vector<noted> left;
  for (const auto& e : v) {
    if (e.kind != "worker") left.push_back(e);
  }
  std::this_thread::sleep_for(300ms);
  for (const auto& e : left) REQUIRE_FALSE(pid_gone(e.pid));
  // The next daemon of this state dir kills them before it starts anything.
  std::optional<daemon_process> d2;
  start_daemon(d2, dir, m);
  INFO(d2->log());
  CHECK(survivors(left, 1s) == "");
  CHECK_THAT(d2->log(), Catch::Contains("a previous daemon's workers left behind"));
  // The new daemon runs the job again, and its shutdown leaves nothing either.
  wait_noted(dir, "escapee", 2);
  d2->signal(false);
  REQUIRE(d2->wait(15s));
  CHECK(survivors(read_pids(dir)) == "");
}

TEST_CASE("escape: a setsid double-fork escapee is recycled with its worker and gone at the end",
          "[integration][escape]") {
  const mode m = GENERATE(mode{"cgroup-env", false, false}, mode{"cgroup-noenv", false, true},
                          mode{"fallback-env", true, false});
  SECTION(m.name) { recycle_and_end(m); }
}

TEST_CASE("escape: cancel leaves no process of the job", "[integration][escape]") {
  const mode m = GENERATE(mode{"cgroup-env", false, false}, mode{"cgroup-noenv", false, true},
                          mode{"fallback-env", true, false});
  SECTION(m.name) { cancel(m); }
}

TEST_CASE("escape: a restarted daemon kills what the SIGKILLed one's workers left",
          "[integration][escape]") {
  const mode m = GENERATE(mode{"cgroup-env", false, false}, mode{"cgroup-noenv", false, true},
                          mode{"fallback-env", true, false});
  SECTION(m.name) { daemon_kill_and_restart(m); }
}

}  // namespace escape_test
