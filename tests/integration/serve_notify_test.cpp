// `baton serve` speaks systemd's notify protocol: the test plays the service manager with its own
// AF_UNIX datagram socket as NOTIFY_SOCKET, runs the real daemon with a short watchdog and a job
// of the example Python worker, and checks READY, STATUS, WATCHDOG, STOPPING and
// EXTEND_TIMEOUT_USEC in the order systemd needs them.
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/datagram_protocol.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "os/process.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using asio::local::datagram_protocol;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace serve_notify_test {

using baton::test::read_text;

using baton::test::python;

// About 5 ms a step (400 features) and 8 steps an epoch: 300 epochs outlast the test by far.
fs::path write_long_job(const fs::path& dir) {
  const json doc = {
      {"name", "notify"},
      {"data", {{"type", "synthetic"}, {"samples", 2048}, {"features", 400}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 256},
        {"epochs", 300}}},
      {"shard", {{"epochs", 300}}},
      {"worker",
       {{"command",
         {python(), std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/train.py"}}}}};
  const auto file = dir / "notify.json";
  std::ofstream(file) << doc.dump(2);
  return file;
}

struct message {
  std::string text;
  clock_type::time_point at;
};

// The service manager's end: every datagram, in arrival order.
class notify_listener {
 public:
  notify_listener(asio::io_context& io, const fs::path& path)
      : socket_(io, datagram_protocol::endpoint(path.string())) {
    receive();
  }
  const std::vector<message>& messages() const { return messages_; }
  std::size_t count(const std::string& prefix) const {
    std::size_t n = 0;
    for (const auto& m : messages_) n += m.text.rfind(prefix, 0) == 0;
    return n;
  }
  // Index of the first message containing `needle` at a line start, or -1.
  int first(const std::string& needle) const {
    for (std::size_t i = 0; i < messages_.size(); ++i) {
      const auto& t = messages_[i].text;
      if (t.rfind(needle, 0) == 0 || t.find("\n" + needle) != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  std::string dump() const {
    std::string s;
    for (const auto& m : messages_) s += "[" + m.text + "]\n";
    return s;
  }

 private:
  void receive() {
    socket_.async_receive(asio::buffer(buf_),
                          [this](const boost::system::error_code& ec, std::size_t n) {
                            if (ec) return;
                            messages_.push_back({std::string(buf_.data(), n), clock_type::now()});
                            receive();
                          });
  }
  datagram_protocol::socket socket_;
  std::array<char, 4096> buf_{};
  std::vector<message> messages_;
};

TEST_CASE("baton serve notifies READY, STATUS, WATCHDOG, STOPPING and EXTEND_TIMEOUT",
          "[integration][daemon][notify]") {
  const auto dir = fs::temp_directory_path() / "baton-itest-serve-notify";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto notify_path = dir / "notify.sock";
  const auto sock = (dir / "s.sock").string();
  const auto log = dir / "daemon.log";

  asio::io_context io;
  notify_listener listener(io, notify_path);
  baton::os::spawn_options o;
  o.argv = {BATON_EXE, "serve", "--state-dir", (dir / "state").string(), "--socket", sock};
  // WATCHDOG_PID stays unset: sd_watchdog_enabled() then takes WATCHDOG_USEC for any pid.
  o.env = {{"NOTIFY_SOCKET", notify_path.string()}, {"WATCHDOG_USEC", "400000"}};
  o.stderr_log = log;
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  auto& daemon = **p;
  daemon.async_read_lines([](const boost::system::error_code&, std::string_view) {});
  std::optional<baton::os::exit_status> exit;
  daemon.async_wait(
      [&](const boost::system::error_code&, baton::os::exit_status st) { exit = st; });

  const auto run_until = [&](auto pred, std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    while (!pred() && clock_type::now() < deadline) io.run_for(20ms);
    return pred();
  };

  REQUIRE(run_until([&] { return listener.first("READY=1") >= 0 || exit; }, 10s));
  INFO("messages:\n" << listener.dump() << "daemon log:\n" << read_text(log));
  REQUIRE(listener.first("READY=1") == 0);
  CHECK(listener.messages()[0].text.find("\nSTATUS=0 running, 0 queued") != std::string::npos);

  const auto sub = baton::test::run_process(
      {BATON_EXE, "submit", write_long_job(dir).string(), "--socket", sock}, {}, dir / "cli.log",
      30s);
  REQUIRE(sub.status == baton::os::exit_status::exited(0));
  const std::string id = sub.out.substr(0, sub.out.find('\n'));

  // A status line with the running count and the worker's progress.
  const auto progress_line = "STATUS=1 running, 0 queued; " + id + " step ";
  REQUIRE(run_until([&] { return listener.first(progress_line) >= 0 || exit; }, 20s));
  // The watchdog comes every 200 ms from the daemon's loop; progress every step (~5 ms) but
  // STATUS at most once a second.
  const auto since = clock_type::now();
  io.run_for(2500ms);
  const auto window_end = clock_type::now();
  CHECK(listener.count("WATCHDOG=1") >= 4);
  std::size_t statuses = 0;
  for (const auto& m : listener.messages()) {
    statuses += m.at >= since && m.at <= window_end && m.text.rfind("STATUS=", 0) == 0;
  }
  CHECK(statuses >= 1);
  CHECK(statuses <= 4);
  REQUIRE_FALSE(exit);

  REQUIRE(daemon.signal_group(baton::os::group_signal::terminate));
  REQUIRE(run_until([&] { return exit.has_value(); }, 30s));
  INFO("after SIGTERM, messages:\n" << listener.dump() << "daemon log:\n" << read_text(log));
  CHECK(*exit == baton::os::exit_status::exited(0));
  const int ready = listener.first("READY=1");
  const int stopping = listener.first("STOPPING=1");
  const int extend = listener.first("EXTEND_TIMEOUT_USEC=");
  REQUIRE(stopping > ready);
  // A worker was checkpointing: the stop timeout was extended, after STOPPING=1, by more than
  // the worker's 30 s default grace.
  REQUIRE(extend > stopping);
  const auto& ext = listener.messages()[extend].text;
  CHECK(std::stoll(ext.substr(ext.find('=') + 1)) > 30'000'000);
  CHECK(listener.messages()[stopping].text.find("STATUS=stopping: ") != std::string::npos);
  // Nothing but status lines (and the watchdog) after STOPPING=1: no READY=1 again.
  for (std::size_t i = stopping + 1; i < listener.messages().size(); ++i) {
    CHECK(listener.messages()[i].text.rfind("READY=1", 0) != 0);
  }
  CHECK(read_text(log).find("queued for the next start") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("baton serve sends RELOADING=1 then READY=1 around SIGHUP",
          "[integration][daemon][notify]") {
  const auto dir = fs::temp_directory_path() / "baton-itest-serve-reload";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto notify_path = dir / "notify.sock";
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << R"({"max_workers": 1})";
  const auto log = dir / "daemon.log";
  asio::io_context io;
  notify_listener listener(io, notify_path);
  baton::os::spawn_options o;
  o.argv = {BATON_EXE,     "serve",
            "--settings",  settings.string(),
            "--state-dir", (dir / "state").string(),
            "--socket",    (dir / "s.sock").string()};
  o.env = {{"NOTIFY_SOCKET", notify_path.string()}};
  o.stderr_log = log;
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  std::optional<baton::os::exit_status> exit;
  (*p)->async_read_lines([](const boost::system::error_code&, std::string_view) {});
  (*p)->async_wait([&](const boost::system::error_code&, baton::os::exit_status st) { exit = st; });
  const auto run_until = [&](auto pred, std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    while (!pred() && clock_type::now() < deadline) io.run_for(20ms);
    return pred();
  };
  REQUIRE(run_until([&] { return listener.first("READY=1") >= 0 || exit; }, 10s));
  INFO("messages:\n" << listener.dump() << "daemon log:\n" << read_text(log));
  std::ofstream(settings, std::ios::trunc) << R"({"max_workers": 3})";
  REQUIRE(::kill(static_cast<pid_t>((*p)->pid()), SIGHUP) == 0);
  REQUIRE(run_until([&] { return listener.count("READY=1") >= 2 || exit; }, 10s));
  INFO("after SIGHUP, messages:\n" << listener.dump() << "daemon log:\n" << read_text(log));
  const int reloading = listener.first("RELOADING=1");
  REQUIRE(reloading > 0);
  CHECK(listener.messages()[reloading].text.find("\nMONOTONIC_USEC=") != std::string::npos);
  CHECK(listener.count("READY=1") == 2);
  CHECK(listener.messages().back().text.rfind("READY=1", 0) == 0);
  // No watchdog was asked for (WATCHDOG_USEC unset), so none is sent.
  CHECK(listener.count("WATCHDOG=1") == 0);
  CHECK(read_text(log).find("max_workers 3") != std::string::npos);
  REQUIRE((*p)->signal_group(baton::os::group_signal::terminate));
  REQUIRE(run_until([&] { return exit.has_value(); }, 10s));
  CHECK(*exit == baton::os::exit_status::exited(0));
  // No worker ran: nothing to wait for, so no extension either.
  CHECK(listener.first("EXTEND_TIMEOUT_USEC=") == -1);
  CHECK(listener.first("STOPPING=1") > reloading);
  fs::remove_all(dir);
}

}  // namespace serve_notify_test
