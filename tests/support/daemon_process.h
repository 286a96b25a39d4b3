// Test harness for `baton serve` as a real process: a daemon_process starts the built `baton`
// on a state dir and socket under a scratch folder, waits until /v1/health answers, and polls job
// status through the socket; run_baton runs one client verb to completion. Shared by the
// integration tests that drive the daemon (daemon_test.cpp, escape_test.cpp).
#pragma once

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "os/process.h"
#include "supervisor/control_client.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace baton::test {

namespace daemon_harness {
namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace control_client = baton::supervisor::control_client;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;
}  // namespace daemon_harness
using namespace daemon_harness;

using ::baton::test::python;  // support/test_paths.h

struct outcome {
  int code = -1;
  std::string out;
};

// Runs `baton args...` to completion (argv, no shell) and returns its exit code and stdout;
// `env` is added to the test's own environment.
inline outcome run_baton(const std::vector<std::string>& args, const fs::path& err_log,
                         std::chrono::seconds limit = 30s,
                         std::vector<std::pair<std::string, std::string>> env = {}) {
  std::vector<std::string> argv = {BATON_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run_process(std::move(argv), std::move(env), err_log, limit);
  return {exit_code_of(r), r.out};
}

using ::baton::test::read_text;  // support/test_paths.h

// Lines `baton` wrote to stderr since the log was last truncated.
inline std::string take_err(const fs::path& p) {
  auto text = read_text(p);
  std::ofstream(p, std::ios::trunc);
  return text;
}

inline bool pid_gone(std::int64_t pid) {
  // A dead worker re-parented to init may linger as a zombie until init reaps it; a zombie runs
  // nothing and holds no memory, so it counts as gone.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

class daemon_process {
 public:
  // `extra`: more `baton serve` arguments; `env`: added to the daemon's environment.
  daemon_process(const fs::path& dir, std::vector<std::string> extra = {},
                 std::vector<std::pair<std::string, std::string>> env = {})
      : dir_(dir), socket_(dir / "s.sock"), log_(dir / "daemon.log") {
    baton::os::spawn_options o;
    o.env = std::move(env);
    o.argv = {BATON_EXE,  "serve",         "--state-dir", (dir / "state").string(),
              "--socket", socket_.string()};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.stderr_log = log_;
    auto p = baton::os::spawn(io_, o);
    REQUIRE(p);
    proc_ = std::move(*p);
    proc_->async_read_lines([](const boost::system::error_code&, std::string_view) {});
    proc_->async_wait(
        [this](const boost::system::error_code&, baton::os::exit_status st) { status_ = st; });
    const auto deadline = clock_type::now() + 10s;
    while (clock_type::now() < deadline) {
      auto h = control_client::call(socket_, "GET", "/v1/health", nullptr, 1s);
      if (h && h->status == 200) return;
      io_.run_for(50ms);
      if (status_) break;
    }
    FAIL("daemon did not come up:\n" << read_text(log_));
  }

  const fs::path& socket() const { return socket_; }
  std::string log() const { return read_text(log_); }
  std::int64_t pid() const { return proc_->pid(); }

  void signal(bool kill) {
    REQUIRE(proc_->signal_group(kill ? baton::os::group_signal::kill
                                     : baton::os::group_signal::terminate));
  }

  // Waits for the daemon to exit; nullopt if it is still running after `limit`.
  std::optional<baton::os::exit_status> wait(std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    while (!status_ && clock_type::now() < deadline) io_.run_for(20ms);
    return status_;
  }

  json status(const std::string& id) {
    auto r = control_client::call(socket_, "GET", "/v1/jobs/" + id);
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return r->body;
  }

  // Polls the job's status until `pred` holds or `limit` passes.
  template <class Pred>
  json poll(const std::string& id, Pred pred, std::chrono::milliseconds limit = 15s) {
    const auto deadline = clock_type::now() + limit;
    json s;
    while (clock_type::now() < deadline) {
      s = status(id);
      if (pred(s)) return s;
      std::this_thread::sleep_for(50ms);
    }
    FAIL("condition not met in time; last status " << s.dump() << "\ndaemon log:\n" << log());
    return s;
  }

 private:
  fs::path dir_, socket_, log_;
  asio::io_context io_;
  std::unique_ptr<baton::os::process> proc_;
  std::optional<baton::os::exit_status> status_;
};

inline std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace baton::test
