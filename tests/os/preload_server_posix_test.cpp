// The fork server with real processes: python/baton/preload.py imports once, the shards it forks
// run the script with the request's argv, environment and folder, sit in the job's cgroup (not
// the server's) and talk over their own pipes; a failed import or a hostile server (a pid that
// is not our child, garbage, silence) is a clear error that breaks the server, never a hang or an
// adopted stranger. The cgroup cases skip where no cgroup is writable.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "os/cgroup.h"
#include "os/preload_server.h"
#include "os/process.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace preload_server_posix_test {

using baton::test::read_text;

std::string unique_key(const std::string& name) {
  return "/tmp/baton-preload-test-" + name + "-" + std::to_string(::getpid());
}

// Cgroup containment and the subreaper, as the daemon has them; skips where cgroups are not
// writable (an unprivileged user without a delegated cgroup).
bool contain(const std::string& name) {
  REQUIRE(baton::os::become_subreaper());
  const auto report = baton::os::setup_containment({unique_key(name), false});
  return report.mode == "cgroup";
}

// The server's options: Debian's python3 with this tree's package on its path (PYTHONPATH may
// point at a fake baton/preload.py instead).
baton::os::spawn_options server_options(const std::string& group, const fs::path& pythonpath) {
  baton::os::spawn_options o;
  o.argv = {"/usr/bin/python3"};
  o.env = {{"PYTHONPATH", pythonpath.string()}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  o.group = group;
  return o;
}

fs::path package_dir() { return fs::path(BATON_SOURCE_DIR) / "python"; }

// A folder with a fake baton/preload.py whose body is `body`, for the hostile-server cases.
fs::path fake_server(const std::string& name, const std::string& body) {
  const fs::path dir =
      fs::temp_directory_path() / ("baton-preload-fake-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "baton");
  std::ofstream(dir / "baton" / "__init__.py") << "";
  std::ofstream(dir / "baton" / "preload.py") << body;
  return dir;
}

// async_wait_ready, run to its answer.
baton::status wait_ready(boost::asio::io_context& io, baton::os::preload_server& s,
                         std::chrono::milliseconds timeout = 30s) {
  std::optional<baton::status> got;
  s.async_wait_ready(timeout, [&](baton::status r) { got = std::move(r); });
  while (!got) io.run_for(10ms);
  return *got;
}

struct shard_run {
  std::vector<std::string> lines;
  std::optional<baton::os::exit_status> status;
};

// Reads the shard's lines until it exits, answering its first line with "pong".
shard_run run_shard(boost::asio::io_context& io, baton::os::process& p,
                    std::chrono::seconds limit = 20s) {
  shard_run r;
  bool eof = false;
  p.async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (ec) {
      eof = true;
      return;
    }
    r.lines.emplace_back(line);
    if (r.lines.size() == 1) p.async_write_line("pong", [](const boost::system::error_code&) {});
  });
  p.async_wait([&](const boost::system::error_code&, baton::os::exit_status st) { r.status = st; });
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while ((!r.status || !eof) && std::chrono::steady_clock::now() < deadline) io.run_for(10ms);
  return r;
}

TEST_CASE("preload: shards forked from one server run in the job's cgroup with their own stdio",
          "[integration][preload]") {
  if (!contain("shards")) BATON_SKIP("no writable cgroup here");
  boost::asio::io_context io;
  baton::os::child_reaper reaper(io);
  auto server = baton::os::preload_server::start(io, server_options("pre-1", package_dir()),
                                                 {"json", "decimal"});
  REQUIRE(server);
  REQUIRE(wait_ready(io, **server));
  const fs::path dir =
      fs::temp_directory_path() / ("baton-preload-shard-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "shard.py")
      << "import os, sys\n"
         "assert 'decimal' in sys.modules  # the server's import, inherited\n"
         "print('hi', sys.argv[1], os.environ.get('SHARD_X'), os.getcwd(), os.getpid(),\n"
         "      open('/proc/self/cgroup').read().replace('\\n', ' '), flush=True)\n"
         "print('got', sys.stdin.readline().strip(), flush=True)\n"
         "sys.exit(int(sys.argv[2]))\n";
  const auto server_cgroup = read_text("/proc/" + std::to_string((*server)->pid()) + "/cgroup");
  for (int i = 0; i < 2; ++i) {
    baton::os::spawn_options o;
    o.argv = {"python3", (dir / "shard.py").string(), "arg" + std::to_string(i),
              std::to_string(3 + i)};
    o.env = {{"SHARD_X", "x" + std::to_string(i)}};
    o.working_dir = dir;
    o.group = "pre-1";
    auto shard = (*server)->fork_worker(io, o, 5s);
    REQUIRE(shard);
    CHECK((*shard)->contained());
    auto r = run_shard(io, **shard);
    REQUIRE(r.lines.size() == 2);
    const auto& hi = r.lines[0];
    CHECK_THAT(hi, Catch::StartsWith("hi arg" + std::to_string(i) + " x" + std::to_string(i) + " " +
                                     fs::canonical(dir).string() + " " +
                                     std::to_string((*shard)->pid()) + " "));
    // The job's cgroup (its line ends there), not the server's "job-pre-1_preload-...".
    CHECK_THAT(hi, Catch::Contains(baton::os::cgroup::job_dir_name("pre-1") + " "));
    CHECK_THAT(server_cgroup, Catch::Contains(baton::os::cgroup::job_dir_name("pre-1/preload")));
    CHECK(r.lines[1] == "got pong");
    REQUIRE(r.status);
    CHECK(*r.status == baton::os::exit_status::exited(3 + i));
    CHECK((*server)->usable());
  }
  const auto server_pid = (*server)->pid();
  server->reset();
  // Destroyed: the server and its cgroup are gone.
  for (int i = 0; i < 200 && fs::exists("/proc/" + std::to_string(server_pid)); ++i) {
    io.run_for(10ms);
  }
  CHECK_FALSE(fs::exists("/proc/" + std::to_string(server_pid)));
  fs::remove_all(dir);
}

TEST_CASE("preload: a failed import is the server's first message, with the module named",
          "[integration][preload]") {
  if (!contain("import")) BATON_SKIP("no writable cgroup here");
  boost::asio::io_context io;
  baton::os::child_reaper reaper(io);
  auto server = baton::os::preload_server::start(io, server_options("pre-2", package_dir()),
                                                 {"json", "no_such_module_for_baton"});
  REQUIRE(server);
  const auto s = wait_ready(io, **server);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("import no_such_module_for_baton failed"));
  CHECK_FALSE((*server)->usable());
  baton::os::spawn_options o;
  o.argv = {"python3", "x.py"};
  o.group = "pre-2";
  auto shard = (*server)->fork_worker(io, o, 5s);
  REQUIRE_FALSE(shard);
}

TEST_CASE("preload: a module that starts threads at import is refused", "[integration][preload]") {
  if (!contain("threads")) BATON_SKIP("no writable cgroup here");
  const auto dir = fake_server("threads", "");
  fs::remove_all(dir / "baton");
  std::ofstream(dir / "threaded_module.py")
      << "import threading, time\n"
         "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n";
  boost::asio::io_context io;
  baton::os::child_reaper reaper(io);
  auto o = server_options("pre-3", package_dir());
  o.env[0].second = package_dir().string() + ":" + dir.string();
  auto server = baton::os::preload_server::start(io, o, {"threaded_module"});
  REQUIRE(server);
  const auto s = wait_ready(io, **server);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("started threads"));
  CHECK_THAT(s.error().message, Catch::Contains("TensorFlow"));
  fs::remove_all(dir);
}

TEST_CASE("preload: a hostile server's answers are errors that break it, never an adoption",
          "[integration][preload]") {
  if (!contain("hostile")) BATON_SKIP("no writable cgroup here");
  struct hostile {
    std::string name, reply, expected;
  };
  // Each fake server says ready, then answers the fork request with `reply` (Python).
  const std::vector<hostile> cases = {
      {"init", "{'pid': 1}", "no valid \"pid\""},
      {"stranger", "{'pid': os.getppid()}", "where its fork server runs"},
      {"itself", "{'pid': os.getpid()}", "already one of the supervisor's"},
      // Its own child: in its cgroup, but never re-parented to us.
      {"unreparented", "(lambda c: {'pid': c} if c else (time.sleep(30), os._exit(0)))(os.fork())",
       "not a child of the supervisor"},
      {"garbage", "'not json'", "is not JSON"},
      {"error", "{'error': 'fork request: no'}", "fork request: no"},
      {"silent", "None", "did not answer within"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto dir =
          fake_server(c.name,
                      "import json, os, socket, sys, time\n"
                      "s = socket.socket(fileno=int(sys.argv[sys.argv.index('--fd') + 1]))\n"
                      "s.send(json.dumps({'ready': True}).encode())\n"
                      "data, fds, _, _ = socket.recv_fds(s, 1 << 17, 8)\n"
                      "r = " +
                          c.reply +
                          "\n"
                          "if r is None: time.sleep(30)\n"
                          "s.send((json.dumps(r) if not isinstance(r, str) else r).encode())\n"
                          "time.sleep(30)\n");
      boost::asio::io_context io;
      baton::os::child_reaper reaper(io);
      auto server = baton::os::preload_server::start(io, server_options("pre-4", dir), {});
      REQUIRE(server);
      REQUIRE(wait_ready(io, **server));
      baton::os::spawn_options o;
      o.argv = {"python3", "x.py"};
      o.group = "pre-4";
      const auto t0 = std::chrono::steady_clock::now();
      auto shard = (*server)->fork_worker(io, o, 1s);
      REQUIRE_FALSE(shard);
      CHECK(std::chrono::steady_clock::now() - t0 < 5s);
      CHECK_THAT(shard.error().message, Catch::Contains(c.expected));
      CHECK_FALSE((*server)->usable());
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("preload: refused without cgroup containment", "[integration][preload]") {
  REQUIRE(baton::os::become_subreaper());
  const auto report = baton::os::setup_containment({unique_key("fallback"), true});
  REQUIRE(report.mode == "process-group");
  boost::asio::io_context io;
  auto server =
      baton::os::preload_server::start(io, server_options("pre-5", package_dir()), {"json"});
  REQUIRE_FALSE(server);
  CHECK_THAT(server.error().message, Catch::Contains("needs cgroup containment"));
}

}  // namespace preload_server_posix_test
