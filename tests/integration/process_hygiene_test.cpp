// Process hygiene under `baton run`: a worker that starts a child which ignores SIGTERM, and a
// grandchild that double-forks into its own session (out of the worker's process group, and
// re-parented away from the worker), must leave nothing running once the supervisor has killed
// the worker. The whole real path runs: become_subreaper, the group kill, kill_descendants.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace process_hygiene_test {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-hygiene-" + name);
}

// The worker: says hello, starts a SIGTERM-ignoring child in its group and a double-forked
// setsid() grandchild (both record their pids in argv[1]/pids), waits until the grandchild has,
// then grows past the hard limit and waits to be killed. It never checkpoints, so every attempt is
// a hard kill without progress and the job fails after restart.max_failures of them.
constexpr const char* worker_script = R"PY(
import json, os, signal, sys, time
pids = os.path.join(sys.argv[1], "pids")
def note(kind):
    with open(pids, "a") as f:
        f.write("%s %d\n" % (kind, os.getpid()))
        f.flush()
        os.fsync(f.fileno())
print(json.dumps({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "hygiene"}),
      flush=True)
note("worker")
with open(os.path.join(sys.argv[1], "fds"), "a") as f:
    here = "/proc/self/fd"
    for fd in sorted(int(x) for x in os.listdir(here)):
        if fd > 2 and fd != f.fileno():
            try:
                f.write("%d %s\n" % (fd, os.readlink("%s/%d" % (here, fd))))
            except OSError:
                pass  # the listdir's own descriptor, closed by now
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note("child")
    if os.fork() == 0:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        note("escapee")
        while True:
            time.sleep(1)
    while True:
        time.sleep(1)
# Not a fixed sleep: on a loaded machine the escapee may take longer to note itself, and a hard
# kill before it has would leave the test without its pid.
def count(kind):
    with open(pids) as f:
        return sum(1 for line in f if line.startswith(kind + " "))
deadline = time.time() + 30
while count("escapee") < count("worker") and time.time() < deadline:
    time.sleep(0.02)
hog = bytearray(200 << 20)
for i in range(0, len(hog), 4096):
    hog[i] = 1
while True:
    time.sleep(1)
)PY";

bool alive(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  // A zombie is dead; its parent just has not reaped it yet.
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

TEST_CASE("no descendant of a killed worker outlives the supervisor's kill",
          "[integration][process_hygiene]") {
  const auto dir = scratch("escapees");
  std::ifstream in(std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/job.json");
  json job = json::parse(in);
  job["name"] = "hygiene";
  job["worker"] = {{"command", {"python3", "-c", worker_script, dir.string()}},
                   {"stop_grace_ms", 500}};
  job["memory"] = {{"soft_limit_mib", 100}, {"hard_limit_mib", 150}, {"poll_ms", 50}};
  job["restart"] = {{"max_failures", 2}, {"backoff_initial_ms", 100}, {"backoff_max_ms", 200}};
  job.erase("debug");
  std::ofstream(dir / "job.json") << job.dump(2);

  auto r = baton::test::run_process({BATON_EXE, "run", (dir / "job.json").string(), "--state-dir",
                                     (dir / "state").string(), "--json"},
                                    {}, dir / "baton.stderr", 90s);
  REQUIRE_FALSE(r.timed_out);
  INFO(r.out);
  const auto summary = json::parse(r.out);
  CHECK(summary["state"] == "failed");
  CHECK(summary["exits_by_cause"]["memory_hard"] == 2);

  std::vector<std::pair<std::string, std::int64_t>> pids;
  {
    std::ifstream f(dir / "pids");
    std::string kind;
    std::int64_t pid = 0;
    while (f >> kind >> pid) pids.emplace_back(kind, pid);
  }
  // The worker inherits stdio and nothing else of the supervisor's (no control socket, no log
  // or state file descriptors).
  std::ifstream fds(dir / "fds");
  const std::string leaked{std::istreambuf_iterator<char>(fds), std::istreambuf_iterator<char>()};
  CHECK(leaked == "");
  // Two attempts, each with a worker, a child and an escapee.
  REQUIRE(pids.size() == 6);
  // The supervisor's kill is over once `baton run` has returned; allow the grace period plus
  // one second for the kernel to finish them.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(job["worker"]["stop_grace_ms"].get<int>()) + 1s;
  std::vector<std::string> survivors;
  do {
    survivors.clear();
    for (const auto& [kind, pid] : pids) {
      if (alive(pid)) survivors.push_back(kind + " " + std::to_string(pid));
    }
    if (survivors.empty()) break;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < deadline);
  std::ostringstream list;
  for (const auto& s : survivors) list << s << "\n";
  INFO("still running:\n" << list.str());
  CHECK(survivors.empty());
  // Never leave a stray process on the test machine, whatever the outcome.
  for (const auto& [kind, pid] : pids) {
    if (alive(pid)) (void)baton::test::run_process({"kill", "-9", std::to_string(pid)});
  }
  fs::remove_all(dir);
}

}  // namespace process_hygiene_test
