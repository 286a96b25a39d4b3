// Starts real child processes (python3, /bin/cat, /bin/echo, /bin/sleep): these tests need a
// Linux /proc. The PDEATHSIG test forks, so this file (an OS-layer test) uses POSIX headers.
#include "os/process.h"

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
#include <thread>

#include "os/posix/proc_stat.h"
#include "os/self_memory.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using baton::os::exit_status;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace process_test {

// What a test saw of one child: its lines, how reading ended, how it exited.
struct observed {
  std::vector<std::string> lines;
  std::vector<std::string> cut_lines;
  boost::system::error_code read_end;
  bool read_done = false;
  bool exit_done = false;
  exit_status status;
};

void watch(baton::os::process& p, observed& o) {
  p.async_read_lines([&o](const boost::system::error_code& ec, std::string_view line) {
    if (!ec) {
      o.lines.emplace_back(line);
    } else if (ec == boost::system::errc::message_size) {
      o.cut_lines.emplace_back(line);
    } else {
      o.read_end = ec;
      o.read_done = true;
    }
  });
  p.async_wait([&o](const boost::system::error_code& ec, exit_status st) {
    REQUIRE_FALSE(ec);
    o.status = st;
    o.exit_done = true;
  });
}

template <class Pred>
bool run_until(boost::asio::io_context& io, Pred done, std::chrono::milliseconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(10ms);
  }
  return done();
}

// Spawns `opts` and reads it to its end: its lines and its exit.
observed run_to_end(boost::asio::io_context& io, const baton::os::spawn_options& opts) {
  auto p = baton::os::spawn(io, opts);
  REQUIRE(p);
  observed o;
  watch(**p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  return o;
}

bool alive(std::int64_t pid) {
  auto table = baton::os::procfs::list_processes();
  REQUIRE(table);
  for (const auto& e : *table) {
    if (e.pid == pid) return e.state != 'Z' && e.state != 'X';
  }
  return false;
}

bool wait_dead(std::int64_t pid, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (alive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::unique_ptr<baton::os::process> start(boost::asio::io_context& io,
                                          std::vector<std::string> argv) {
  baton::os::spawn_options o;
  o.argv = std::move(argv);
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  return std::move(*p);
}

std::unique_ptr<baton::os::process> python(boost::asio::io_context& io, const std::string& code) {
  return start(io, {"python3", "-c", code});
}

// Spawns `o` with its stdout paced on a tick that never comes within a test, and watches it.
std::unique_ptr<baton::os::process> start_paced(boost::asio::io_context& io,
                                                baton::os::spawn_options o, observed& seen) {
  o.read_pace = std::chrono::hours(1);
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  watch(**p, seen);
  return std::move(*p);
}

fs::path scratch_dir(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-process-test-" + name);
}

constexpr std::uint64_t mib = 1024 * 1024;

TEST_CASE("spawn reads stdout lines and a clean exit", "[integration][process]") {
  boost::asio::io_context io;
  auto p = start(io, {"/bin/echo", "hello world"});
  CHECK(p->pid() > 0);
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  CHECK(o.lines == std::vector<std::string>{"hello world"});
  CHECK(o.read_end == boost::asio::error::eof);
  CHECK(o.status == exit_status::exited(0));
  CHECK(p->exited());
}

TEST_CASE("several lines, a last line without newline, and a nonzero exit code",
          "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import sys\nprint('a'); print('b', flush=True)\n"
                  "sys.stdout.write('tail'); sys.exit(3)");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  CHECK(o.lines == std::vector<std::string>{"a", "b", "tail"});
  CHECK(o.status == exit_status::exited(3));
  CHECK(o.status.describe() == "exit code 3");
}

TEST_CASE("a signal death is told apart from an exit code", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io, "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK(o.status == exit_status::signaled(SIGABRT));
  CHECK(o.status.describe() == "signal 6");
}

TEST_CASE("SIGTERM to the group ends a sleeping child", "[integration][process]") {
  boost::asio::io_context io;
  auto p = start(io, {"sleep", "100"});
  observed o;
  watch(*p, o);
  REQUIRE(p->signal_group(baton::os::group_signal::terminate));
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK(o.status == exit_status::signaled(SIGTERM));
  // The group is gone now: signalling it again is not an error.
  CHECK(p->signal_group(baton::os::group_signal::kill));
}

TEST_CASE("lines written to stdin reach the child in order", "[integration][process]") {
  boost::asio::io_context io;
  auto p = start(io, {"/bin/cat"});
  observed o;
  watch(*p, o);
  int written = 0;
  p->async_write_line("{\"type\":\"stop\"}", [&](const boost::system::error_code& ec) {
    CHECK_FALSE(ec);
    ++written;
  });
  p->async_write_line("second", [&](const boost::system::error_code& ec) {
    CHECK_FALSE(ec);
    ++written;
  });
  REQUIRE(run_until(io, [&] { return o.lines.size() == 2; }));
  CHECK(written == 2);
  CHECK(o.lines == std::vector<std::string>{"{\"type\":\"stop\"}", "second"});
  p->close_stdin();
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  CHECK(o.status == exit_status::exited(0));
}

TEST_CASE("writing to a dead child's stdin is an error, not SIGPIPE", "[integration][process]") {
  boost::asio::io_context io;
  auto p = start(io, {"/bin/true"});
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.exit_done && o.read_done; }));
  boost::system::error_code got;
  bool done = false;
  p->async_write_line("stop", [&](const boost::system::error_code& ec) {
    got = ec;
    done = true;
  });
  REQUIRE(run_until(io, [&] { return done; }));
  CHECK(got == boost::asio::error::broken_pipe);
}

TEST_CASE("environment, working folder and appended stderr log", "[integration][process]") {
  const auto dir = scratch_dir("env");
  const auto log = dir / "worker.log";
  std::ofstream(log) << "earlier\n";
  boost::asio::io_context io;
  baton::os::spawn_options opts;
  opts.argv = {"python3", "-c",
               "import os, sys\nprint(os.environ['BATON_TEST_X'])\nprint(os.getcwd())\n"
               "print('PATH' in os.environ)\nsys.stderr.write('to the log\\n')"};
  opts.env = {{"BATON_TEST_X", "first"}, {"BATON_TEST_X", "42"}};
  opts.working_dir = dir;
  opts.stderr_log = log;
  auto p = baton::os::spawn(io, opts);
  REQUIRE(p);
  observed o;
  watch(**p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  CHECK(o.status == exit_status::exited(0));
  REQUIRE(o.lines.size() == 3);
  CHECK(o.lines[0] == "42");
  CHECK(fs::equivalent(o.lines[1], dir));
  CHECK(o.lines[2] == "True");  // inherited environment kept
  std::stringstream content;
  content << std::ifstream(log).rdbuf();
  CHECK(content.str() == "earlier\nto the log\n");
  fs::remove_all(dir);
}

TEST_CASE("stderr through on_stderr: 1 GiB in bounded chunks, the child never blocked",
          "[integration][process]") {
  boost::asio::io_context io;
  constexpr std::uint64_t total = 1024 * mib;
  std::uint64_t got = 0;
  std::size_t largest = 0;
  int chunks = 0;
  bool ended = false;
  boost::system::error_code end;
  baton::os::spawn_options opts;
  opts.argv = {"/bin/sh", "-c", "head -c " + std::to_string(total) + " /dev/zero >&2; echo done"};
  opts.on_stderr = [&](const boost::system::error_code& ec, std::string_view data) {
    if (ec) {
      CHECK(data.empty());
      end = ec;
      ended = true;
      return;
    }
    CHECK_FALSE(ended);  // nothing after the last call
    got += data.size();
    largest = std::max(largest, data.size());
    ++chunks;
  };
  const auto rss_before = baton::os::own_rss_bytes();
  auto p = baton::os::spawn(io, opts);
  REQUIRE(p);
  observed o;
  watch(**p, o);
  REQUIRE(run_until(
      io, [&] { return o.read_done && o.exit_done && ended; }, 120s));
  CHECK(o.status == exit_status::exited(0));
  CHECK(o.lines == std::vector<std::string>{"done"});
  CHECK(got == total);
  CHECK(end == boost::asio::error::eof);
  CHECK(largest <= 64 * 1024);
  CHECK(chunks >= static_cast<int>(total / (64 * 1024)));
  const auto rss_after = baton::os::own_rss_bytes();
  if (rss_before && rss_after && *rss_after > *rss_before) {
    CHECK(*rss_after - *rss_before < 32 * mib);  // one chunk in flight, not the stream
  }
}

TEST_CASE("a grandchild holding stderr open does not delay the exit, nor the end of the process",
          "[integration][process]") {
  boost::asio::io_context io;
  std::string text;
  bool ended = false;
  int calls_after_reset = 0;
  bool reset = false;
  baton::os::spawn_options opts;
  // The sleep keeps only stderr: stdout goes to /dev/null, so stdout's end comes with the exit.
  opts.argv = {"python3", "-c",
               "import subprocess, sys\n"
               "p = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL)\n"
               "print(p.pid, flush=True)\nsys.stderr.write('bye\\n')\nsys.stderr.flush()"};
  opts.on_stderr = [&](const boost::system::error_code& ec, std::string_view data) {
    if (reset) ++calls_after_reset;
    if (ec) {
      ended = true;
    } else {
      text.append(data);
    }
  };
  auto p = baton::os::spawn(io, opts);
  REQUIRE(p);
  observed o;
  watch(**p, o);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_until(
      io, [&] { return o.read_done && o.exit_done && text == "bye\n"; }, 10s));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(o.status == exit_status::exited(0));
  REQUIRE(o.lines.size() == 1);
  const auto grandchild = std::stoll(o.lines[0]);
  CHECK(alive(grandchild));
  CHECK_FALSE(ended);  // the grandchild still holds the write end
  reset = true;
  p->reset();  // our end of the pipe closes: no handler of ours runs any more
  ::kill(static_cast<pid_t>(grandchild), SIGKILL);  // its end closes too: an EOF nobody gets
  CHECK(wait_dead(grandchild));
  run_until(
      io, [] { return false; }, 300ms);
  CHECK(calls_after_reset == 0);
}

TEST_CASE("spawn failures are errors naming the program or folder", "[integration][process]") {
  boost::asio::io_context io;
  baton::os::spawn_options opts;
  opts.argv = {"baton-no-such-program"};
  auto r = baton::os::spawn(io, opts);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("baton-no-such-program") != std::string::npos);

  opts.argv = {"/nonexistent/baton/worker"};
  r = baton::os::spawn(io, opts);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("/nonexistent/baton/worker") != std::string::npos);

  opts.argv = {"/bin/true"};
  opts.working_dir = "/nonexistent/baton/dir";
  r = baton::os::spawn(io, opts);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("/nonexistent/baton/dir") != std::string::npos);

  opts = {};
  r = baton::os::spawn(io, opts);
  REQUIRE_FALSE(r);
}

TEST_CASE("a bare program name is looked up in the PATH the child gets, not the supervisor's",
          "[integration][process]") {
  // A submitter's PATH (system mode) holds programs the daemon's does not: a user's own python.
  const auto dir = scratch_dir("own-path");
  const auto bin = dir / "bin";
  fs::create_directories(bin);
  const auto program = bin / "baton-test-only-here";
  std::ofstream(program) << "#!/bin/sh\necho \"found as $0 with PATH=$PATH\"\n";
  fs::permissions(program, fs::perms::owner_all);
  boost::asio::io_context io;
  baton::os::spawn_options opts;
  opts.argv = {"baton-test-only-here"};
  auto missing = baton::os::spawn(io, opts);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "spawn baton-test-only-here: not found in PATH");

  const std::string own_path = bin.string() + ":/usr/bin:/bin";
  opts.env = {{"PATH", "/nonexistent"}, {"PATH", own_path}};  // the last one is the child's
  const auto o = run_to_end(io, opts);
  CHECK(o.status == exit_status::exited(0));
  REQUIRE(o.lines.size() == 1);
  CHECK(o.lines[0] == "found as " + program.string() + " with PATH=" + own_path);

  // As a shell does: relative entries are the child's working folder's, and a file that is not
  // executable, or a folder of that name, is passed over.
  fs::create_directories(dir / "noexec");
  std::ofstream(dir / "noexec" / "baton-test-only-here") << "#!/bin/sh\necho wrong\n";
  fs::permissions(dir / "noexec" / "baton-test-only-here",
                  fs::perms::owner_read | fs::perms::owner_write);
  fs::create_directories(dir / "isdir" / "baton-test-only-here");
  opts.env = {{"PATH", "noexec:isdir:bin:/usr/bin:/bin"}};
  opts.working_dir = dir;
  const auto r = run_to_end(io, opts);
  CHECK(r.status == exit_status::exited(0));
  REQUIRE(r.lines.size() == 1);
  CHECK(r.lines[0] == "found as " + program.string() + " with PATH=noexec:isdir:bin:/usr/bin:/bin");
  fs::remove_all(dir);
}

TEST_CASE("an over-long line is cut and reported, and reading goes on", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import sys\nsys.stdout.write('x' * (3 * 1024 * 1024 // 2) + '\\n')\n"
                  "print('next')");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  REQUIRE(o.cut_lines.size() == 1);
  CHECK(o.cut_lines[0].size() == baton::os::max_line_bytes);
  CHECK(o.cut_lines[0].find_first_not_of('x') == std::string::npos);
  CHECK(o.lines == std::vector<std::string>{"next"});
}

TEST_CASE("the child leads its own process group", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io, "import os\nprint(os.getpgid(0), os.getpid(), os.getsid(0))");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done; }));
  REQUIRE(o.lines.size() == 1);
  std::istringstream in(o.lines[0]);
  long pgid = 0, pid = 0, sid = 0;
  in >> pgid >> pid >> sid;
  CHECK(pid == p->pid());
  CHECK(pgid == pid);
  CHECK(pgid != ::getpgid(0));
}

TEST_CASE("a group kill reaches a grandchild", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import subprocess\np = subprocess.Popen(['sleep', '100'])\n"
                  "print(p.pid, flush=True)\np.wait()");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return !o.lines.empty(); }));
  const auto grandchild = std::stoll(o.lines[0]);
  CHECK(alive(grandchild));
  REQUIRE(p->signal_group(baton::os::group_signal::kill));
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK(o.status == exit_status::signaled(SIGKILL));
  CHECK(wait_dead(grandchild));
}

TEST_CASE("destroying a process kills its group and calls no handler", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import subprocess\np = subprocess.Popen(['sleep', '100'])\n"
                  "print(p.pid, flush=True)\np.wait()");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return !o.lines.empty(); }));
  const auto child = p->pid();
  const auto grandchild = std::stoll(o.lines[0]);
  p.reset();
  run_until(
      io, [] { return false; }, 300ms);
  CHECK_FALSE(o.exit_done);
  CHECK_FALSE(o.read_done);
  CHECK(wait_dead(child));
  CHECK(wait_dead(grandchild));
}

TEST_CASE("rss counts current memory of the child", "[integration][process]") {
  boost::asio::io_context io;
  // bytes * n writes every page, so all 200 MiB are resident (a bare bytearray(n) might not be).
  auto p = python(io,
                  "import sys, time\nb = b'\\x01' * (200 * 1024 * 1024)\n"
                  "print('ready', flush=True)\nsys.stdin.readline()");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return !o.lines.empty(); }));
  auto rss = p->rss_bytes();
  REQUIRE(rss);
  CHECK(*rss >= 200 * mib);
  CHECK(*rss < 320 * mib);
  p->close_stdin();
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK_FALSE(p->rss_bytes());  // gone: an error, not zero
}

TEST_CASE("rss sums every descendant", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import subprocess, sys\n"
                  "code = \"import sys\\nb = b'1' * (150 * 1024 * 1024)\\nprint('ok', flush=True)"
                  "\\nsys.stdin.readline()\"\n"
                  "c = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE,"
                  " stdin=subprocess.PIPE)\n"
                  "c.stdout.readline()\nprint(c.pid, flush=True)\nsys.stdin.readline()\n"
                  "c.stdin.close(); c.wait()");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return !o.lines.empty(); }));
  const auto grandchild = std::stoll(o.lines[0]);
  auto own = baton::os::procfs::rss_bytes_of(p->pid());
  REQUIRE(own);
  CHECK(*own < 100 * mib);
  auto tree = p->rss_bytes();
  REQUIRE(tree);
  CHECK(*tree >= 150 * mib + *own);
  CHECK(*tree < 300 * mib);
  auto direct = baton::os::tree_rss_bytes(grandchild);
  REQUIRE(direct);
  CHECK(*direct >= 150 * mib);
  p->close_stdin();
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK(o.status == exit_status::exited(0));
}

TEST_CASE("kill_descendants reaches a child that left the group with setsid",
          "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io,
                  "import subprocess, sys\n"
                  "c = subprocess.Popen(['sleep', '100'], start_new_session=True)\n"
                  "print(c.pid, flush=True)\nsys.stdin.readline()");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return !o.lines.empty(); }));
  const auto escaped = std::stoll(o.lines[0]);
  REQUIRE(p->signal_group(baton::os::group_signal::kill));
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  // The group kill missed it: it has its own session and group.
  CHECK(alive(escaped));
  // Re-parented (to init, or to us when a subreaper): kill it through its new parent's view.
  REQUIRE(::kill(static_cast<pid_t>(escaped), SIGKILL) == 0);
  CHECK(wait_dead(escaped));

  // Now while the parent is alive: kill_descendants finds it by walking the tree.
  auto q = python(io,
                  "import subprocess, sys\n"
                  "c = subprocess.Popen(['sleep', '100'], start_new_session=True)\n"
                  "print(c.pid, flush=True)\nsys.stdin.readline()");
  observed o2;
  watch(*q, o2);
  REQUIRE(run_until(io, [&] { return !o2.lines.empty(); }));
  const auto escaped2 = std::stoll(o2.lines[0]);
  auto n = baton::os::kill_descendants(q->pid());
  REQUIRE(n);
  CHECK(*n == 1);
  CHECK(wait_dead(escaped2));
  CHECK(alive(q->pid()));  // kill_descendants spares the root
  q->close_stdin();
  REQUIRE(run_until(io, [&] { return o2.exit_done; }));
}

TEST_CASE("as subreaper, a double-forked orphan is killed and reaped", "[integration][process]") {
  REQUIRE(baton::os::become_subreaper());
  boost::asio::io_context io;
  auto p = python(io,
                  "import os, time\n"
                  "if os.fork() == 0:\n"
                  "    os.setsid()\n"
                  "    if os.fork() == 0:\n"
                  "        print(os.getpid(), flush=True)\n"
                  "        time.sleep(100)\n"
                  "    os._exit(0)\n"
                  "os.wait()\n");
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.exit_done && !o.lines.empty(); }));
  const auto orphan = std::stoll(o.lines[0]);
  REQUIRE(alive(orphan));
  auto table = baton::os::procfs::list_processes();
  REQUIRE(table);
  bool ours = false;
  for (const auto& e : *table) ours = ours || (e.pid == orphan && e.ppid == ::getpid());
  CHECK(ours);  // re-parented to the subreaper, not init

  auto killed = baton::os::kill_orphans();
  REQUIRE(killed);
  CHECK(*killed >= 1);
  CHECK(wait_dead(orphan));
  auto reaped = baton::os::reap_orphans();
  REQUIRE(reaped);
  CHECK(*reaped >= 1);
  table = baton::os::procfs::list_processes();
  REQUIRE(table);
  for (const auto& e : *table) CHECK(e.pid != orphan);  // no zombie left
}

TEST_CASE("reap_orphans leaves spawned children's exit status alone", "[integration][process]") {
  boost::asio::io_context io;
  auto p = python(io, "import sys\nsys.exit(7)");
  // Let it become a zombie before anyone waits for it.
  std::this_thread::sleep_for(500ms);
  auto reaped = baton::os::reap_orphans();
  REQUIRE(reaped);
  auto killed = baton::os::kill_orphans();
  REQUIRE(killed);
  CHECK(*killed == 0);
  observed o;
  watch(*p, o);
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
  CHECK(o.status == exit_status::exited(7));
}

// Forks a stand-in supervisor that spawns a long sleeper (as `credentials`, if set), kills the
// stand-in, and checks the sleeper dies with it (PR_SET_PDEATHSIG).
void check_worker_dies_with_its_spawner(
    const std::optional<baton::os::process_credentials>& credentials) {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t middle = ::fork();
  REQUIRE(middle >= 0);
  if (middle == 0) {
    // The stand-in supervisor: spawn a long sleeper, tell the test its pid, wait to be killed.
    ::close(report[0]);
    boost::asio::io_context child_io;
    baton::os::spawn_options opts;
    opts.argv = {"sleep", "100"};
    opts.credentials = credentials;
    auto w = baton::os::spawn(child_io, opts);
    const long pid = w ? static_cast<long>((*w)->pid()) : -1;
    if (::write(report[1], &pid, sizeof pid) != sizeof pid) ::_exit(2);
    ::pause();
    ::_exit(0);
  }
  ::close(report[1]);
  long worker = 0;
  REQUIRE(::read(report[0], &worker, sizeof worker) == sizeof worker);
  ::close(report[0]);
  REQUIRE(worker > 0);
  CHECK(alive(worker));
  REQUIRE(::kill(middle, SIGKILL) == 0);
  int st = 0;
  REQUIRE(::waitpid(middle, &st, 0) == middle);
  CHECK(wait_dead(worker));
  (void)baton::os::reap_orphans();  // it may have been re-parented to us
}

TEST_CASE("a worker dies when the process that spawned it is killed", "[integration][process]") {
  check_worker_dies_with_its_spawner(std::nullopt);
}

TEST_CASE("paced reading: a worker's last lines, stderr and end come at its exit, not a tick later",
          "[integration][process]") {
  boost::asio::io_context io;
  baton::os::spawn_options opt;
  // A line, a pause long enough that the first read has parked the reader, the rest, the exit.
  opt.argv = {"python3", "-c",
              "import sys, time\nprint('first', flush=True)\ntime.sleep(0.3)\n"
              "print('second'); print('third', flush=True)\nsys.stderr.write('err tail')\n"};
  std::string err;
  bool err_done = false;
  opt.on_stderr = [&](const boost::system::error_code& ec, std::string_view data) {
    if (ec) err_done = true;
    err += data;
  };
  observed o;
  const auto started = start_paced(io, opt, o);
  REQUIRE(run_until(io, [&] { return o.read_done && o.exit_done && err_done; }));
  CHECK(o.lines == std::vector<std::string>{"first", "second", "third"});
  CHECK(o.read_end == boost::asio::error::eof);
  CHECK(err == "err tail");
}

TEST_CASE("paced reading: read_unpaced reads a live worker's lines as they come",
          "[integration][process]") {
  boost::asio::io_context io;
  baton::os::spawn_options opt;
  // Echoes each stdin line: the test chooses when a line is written. Each line in one write: a
  // line split across two reads would wait for the tick between them (print() on an unbuffered
  // stdout, PYTHONUNBUFFERED, writes the text and its newline apart).
  opt.argv = {"/usr/bin/python3", "-c",
              "import os, sys\nos.write(1, b'first\\n')\n"
              "for l in sys.stdin: os.write(1, l.encode())\n"};
  observed o;
  const auto started = start_paced(io, opt, o);
  auto& p = *started;
  const bool first = run_until(io, [&] { return !o.lines.empty() || o.read_done; });
  INFO("read_done " << o.read_done << ", exit_done " << o.exit_done << ": "
                    << o.status.describe());
  REQUIRE(first);
  REQUIRE(o.lines == std::vector<std::string>{"first"});
  const auto say = [&](const std::string& line) {
    bool written = false;
    p.async_write_line(line, [&](const boost::system::error_code& ec) {
      REQUIRE_FALSE(ec);
      written = true;
    });
    REQUIRE(run_until(io, [&] { return written; }));
  };
  // Paced: the echo waits in the pipe for the tick.
  say("second");
  run_until(
      io, [] { return false; }, 500ms);
  CHECK(o.lines == std::vector<std::string>{"first"});
  // Unpaced: the parked line at once, and every later one as it comes.
  p.read_unpaced();
  CHECK(run_until(
      io, [&] { return o.lines.size() == 2; }, 5s));
  say("third");
  CHECK(run_until(
      io, [&] { return o.lines.size() == 3; }, 5s));
  CHECK(o.lines == std::vector<std::string>{"first", "second", "third"});
  CHECK_FALSE(o.exit_done);
  p.close_stdin();
  REQUIRE(run_until(io, [&] { return o.exit_done; }));
}

// Ids no account uses (no passwd entry needed: the kernel takes any number).
constexpr std::uint32_t test_uid = 61234;
constexpr std::uint32_t test_gid = 61235;
constexpr std::uint32_t test_group = 61236;

baton::os::process_credentials test_user() { return {test_uid, test_gid, {test_group, test_gid}}; }

TEST_CASE("a worker spawned with credentials runs as that user, groups included, for good",
          "[integration][process]") {
  if (::geteuid() != 0) BATON_SKIP("changing a worker's user needs root (CI runs this as root)");
  boost::asio::io_context io;
  baton::os::spawn_options o;
  // The worker itself reports what it is, and tries its way back to root.
  // /usr/bin/python3, not a PATH lookup: the supervisor's PATH may hold folders (root's own)
  // the worker's user cannot enter.
  o.argv = {
      "/usr/bin/python3", "-c",
      "import os\n"
      "print(os.getuid(), os.geteuid(), os.getgid(), os.getegid())\n"
      "print(sorted(os.getgroups()))\n"
      "print(os.getresuid(), os.getresgid())\n"
      "try:\n  os.setuid(0); print('became root')\n"
      "except PermissionError: print('setuid(0) refused')\n"
      "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])\n"
      "print(os.getcwd())\n"};
  const auto dir = scratch_dir("credentials");
  o.working_dir = dir;
  o.credentials = test_user();
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  observed seen;
  watch(**p, seen);
  REQUIRE(run_until(io, [&] { return seen.read_done && seen.exit_done; }));
  CHECK(seen.status == exit_status::exited(0));
  // Built with a stream: GCC 12 warns falsely (-Wrestrict) on long chains of string +.
  const auto line = [](std::initializer_list<std::uint32_t> v, const char* open, const char* close,
                       const char* sep) {
    std::ostringstream out;
    out << open;
    const char* between = "";
    for (const auto x : v) {
      out << between << x;
      between = sep;
    }
    out << close;
    return out.str();
  };
  REQUIRE(seen.lines.size() == 6);
  CHECK(seen.lines[0] == line({test_uid, test_uid, test_gid, test_gid}, "", "", " "));
  CHECK(seen.lines[1] == line({test_gid, test_group}, "[", "]", ", "));
  CHECK(seen.lines[2] == line({test_uid, test_uid, test_uid}, "(", ")", ", ") + " " +
                             line({test_gid, test_gid, test_gid}, "(", ")", ", "));
  CHECK(seen.lines[3] == "setuid(0) refused");
  CHECK(seen.lines[4] == "1");  // PR_SET_NO_NEW_PRIVS
  CHECK(fs::path(seen.lines[5]) == fs::canonical(dir));
}

TEST_CASE("a worker's working folder is entered as its user: one it may not enter fails the spawn",
          "[integration][process]") {
  if (::geteuid() != 0) BATON_SKIP("changing a worker's user needs root (CI runs this as root)");
  const auto dir = scratch_dir("credentials-private") / "root-only";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  boost::asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {"/usr/bin/python3", "-c", "print('ran')"};
  o.working_dir = dir;
  o.credentials = test_user();
  auto p = baton::os::spawn(io, o);
  REQUIRE_FALSE(p);
  CHECK_THAT(p.error().message, Catch::Contains("Permission denied"));
  CHECK_THAT(p.error().message, Catch::Contains("becoming uid " + std::to_string(test_uid)));
}

TEST_CASE("a worker that changed user still dies with the process that spawned it",
          "[integration][process]") {
  if (::geteuid() != 0) BATON_SKIP("changing a worker's user needs root (CI runs this as root)");
  // The kernel clears the death signal on a change of credentials: it must be armed after.
  check_worker_dies_with_its_spawner(test_user());
}

}  // namespace process_test
