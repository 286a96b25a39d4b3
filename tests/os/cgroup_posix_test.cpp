// Containment with real processes: a worker spawned in a group, whose child calls setsid() and
// double-forks, cannot leave the job's cgroup (or, in the forced fallback, is still found by its
// mark), its memory counts, and the group's kill ends it; a later supervisor with the same key
// kills what an earlier one left in its cgroups. The cgroup cases skip where no cgroup is
// writable (an unprivileged user without a delegated cgroup).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "os/cgroup.h"
#include "os/posix/cgroup_linux.h"
#include "os/process.h"
#include "support/skip.h"

namespace fs = std::filesystem;
namespace cg = baton::os::cgroup;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace cgroup_posix_test {

constexpr std::uint64_t mib = 1024 * 1024;

// A process that is gone or a zombie (dead, not yet reaped).
bool dead(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z';
}

bool gone(std::int64_t pid) { return !fs::exists("/proc/" + std::to_string(pid)); }

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The worker: its child leaves the session and double-forks; the escapee holds `mib` MiB and
// writes its pid to `file`; the worker prints "ready" once the pid is there, then sleeps.
std::string escaping_worker(const fs::path& file, int hold_mib) {
  return "import os, sys, time\n"
         "f = " +
         ("'" + file.string() + "'") +
         "\n"
         "if os.fork() == 0:\n"
         "    os.setsid()\n"
         "    if os.fork() > 0:\n"
         "        os._exit(0)\n"
         "    hog = bytearray(" +
         std::to_string(hold_mib) +
         " << 20)\n"
         "    for i in range(0, len(hog), 4096): hog[i] = 1\n"
         "    open(f + '.tmp', 'w').write(str(os.getpid()))\n"
         "    os.rename(f + '.tmp', f)\n"
         "    while True: time.sleep(1)\n"
         "while not os.path.exists(f): time.sleep(0.01)\n"
         "print('ready', flush=True)\n"
         "while True: time.sleep(1)\n";
}

struct started {
  std::unique_ptr<baton::os::process> proc;
  std::int64_t escapee = 0;
};

started start_escaping(boost::asio::io_context& io, const fs::path& dir, const std::string& group,
                       int hold_mib) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  baton::os::spawn_options o;
  o.argv = {"python3", "-c", escaping_worker(dir / "escapee", hold_mib)};
  o.group = group;
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  started s{std::move(*p), 0};
  bool ready = false;
  s.proc->async_read_lines([&ready](const boost::system::error_code& ec, std::string_view line) {
    if (!ec && line == "ready") ready = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!ready && std::chrono::steady_clock::now() < deadline) io.run_for(20ms);
  REQUIRE(ready);
  s.escapee = std::stoll(read_text(dir / "escapee"));
  return s;
}

std::string unique_key(const std::string& name) {
  return "/tmp/baton-cgroup-test-" + name + "-" + std::to_string(::getpid());
}

TEST_CASE("an escapee stays in its job's cgroup, counts, and dies with the group",
          "[integration][cgroup]") {
  const auto report = baton::os::setup_containment({unique_key("escape"), false});
  if (report.mode != "cgroup") BATON_SKIP("no writable cgroup here: " + report.detail);
  INFO(report.detail);
  CHECK(baton::os::current_containment().mode == "cgroup");
  boost::asio::io_context io;
  auto s = start_escaping(io, "/tmp/baton-cgroup-test-escape", "esc-1", 120);
  CHECK(s.proc->contained());
  // Outside the worker's session and tree, but in the job's cgroup.
  const auto where = read_text("/proc/" + std::to_string(s.escapee) + "/cgroup");
  CHECK_THAT(where, Catch::Contains(cg::job_dir_name("esc-1")));
  auto mem = s.proc->rss_bytes();
  REQUIRE(mem);
  CHECK(*mem >= 120 * mib);
  CHECK(*mem < 300 * mib);
  REQUIRE(s.proc->signal_group(baton::os::group_signal::kill));
  CHECK(eventually([&] { return dead(s.escapee); }));
  s.proc.reset();
  // Removed once empty.
  std::string why;
  const auto h = cg::set_up(unique_key("escape"), why);
  for (const auto& base : {h.v2_base, h.v1_base}) {
    if (base.empty()) continue;
    CHECK_FALSE(fs::exists(base + "/" + cg::job_dir_name("esc-1")));
    fs::remove(base);
  }
  (void)::waitpid(-1, nullptr, WNOHANG);
}

TEST_CASE("a later supervisor with the same key kills what an earlier one left in its cgroups",
          "[integration][cgroup]") {
  const auto key = unique_key("leftover");
  std::string why;
  const auto h = cg::set_up(key, why);
  if (!h.usable()) BATON_SKIP("no writable cgroup here: " + why);
  auto job = cg::open_job(h, "left-1");
  REQUIRE(job);
  const auto files = (*job)->procs_files();
  // A process of the "previous life": joins the job cgroup, then runs on its own.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (const auto& f : files) {
      std::ofstream(f) << "0";
    }
    ::execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(eventually([&] {
    auto m = (*job)->members();
    return m && m->size() == 1;
  }));
  const auto report = baton::os::setup_containment({key, false});
  CHECK(report.mode == "cgroup");
  CHECK(report.leftovers_killed == 1);
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);
  CHECK_FALSE((*job)->members());  // the job cgroup itself is gone
  for (const auto& base : {h.v2_base, h.v1_base}) {
    if (!base.empty()) fs::remove(base);
  }
}

TEST_CASE("forced fallback: the marked escapee counts, dies with the kill and is reaped at once",
          "[integration][cgroup]") {
  REQUIRE(baton::os::become_subreaper());
  const auto report = baton::os::setup_containment({unique_key("fallback"), true});
  CHECK(report.mode == "process-group");
  CHECK_THAT(report.detail, Catch::Contains("forced"));
  boost::asio::io_context io;
  baton::os::child_reaper reaper(io);
  auto s = start_escaping(io, "/tmp/baton-cgroup-test-fallback", "fb-1", 120);
  CHECK_FALSE(s.proc->contained());
  // Re-parented to us (subreaper), out of the worker's tree and group.
  REQUIRE(eventually([&] {
    const auto stat = read_text("/proc/" + std::to_string(s.escapee) + "/stat");
    return stat.find(") S " + std::to_string(::getpid()) + " ") != std::string::npos ||
           stat.find(") R " + std::to_string(::getpid()) + " ") != std::string::npos;
  }));
  auto mem = s.proc->rss_bytes();
  REQUIRE(mem);
  CHECK(*mem >= 120 * mib);
  REQUIRE(s.proc->signal_group(baton::os::group_signal::kill));
  // Reaped by the child_reaper on its SIGCHLD, not left a zombie.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!gone(s.escapee) && std::chrono::steady_clock::now() < deadline) io.run_for(10ms);
  CHECK(gone(s.escapee));
  CHECK(reaper.reaped() >= 1);
}

}  // namespace cgroup_posix_test
