// Test helper: runs a program (argv, never a shell) to completion through os::spawn and returns
// its exit status and stdout. Integration tests use it to drive the real `baton` and workers.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "os/process.h"

namespace baton::test {

struct process_output {
  os::exit_status status;
  std::string out;  // stdout, lines joined with '\n'
  bool timed_out = false;
};

// Runs the process `o` describes to completion: its stdout, and its stderr too when `o.on_stderr`
// takes it, are read to their ends; after `timeout` its group is killed and `timed_out` set.
// Throws when it cannot be started.
inline process_output run_spawned(os::spawn_options o,
                                  std::chrono::seconds timeout = std::chrono::seconds(120)) {
  boost::asio::io_context io;
  process_output result;
  bool out_done = false;
  bool err_done = !o.on_stderr;
  bool exited = false;
  const auto maybe_stop = [&] {
    if (out_done && err_done && exited) io.stop();
  };
  if (o.on_stderr) {
    o.on_stderr = [&, take = std::move(o.on_stderr)](const boost::system::error_code& ec,
                                                     std::string_view data) {
      take(ec, data);
      if (ec) {
        err_done = true;
        maybe_stop();
      }
    };
  }
  auto p = os::spawn(io, o);
  if (!p) throw std::runtime_error(p.error().message);
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (ec && ec != boost::system::errc::message_size) {
      out_done = true;
      maybe_stop();
      return;
    }
    result.out.append(line);
    result.out.push_back('\n');
  });
  (*p)->async_wait([&](const boost::system::error_code&, os::exit_status st) {
    result.status = st;
    exited = true;
    maybe_stop();
  });
  boost::asio::steady_timer deadline(io, timeout);
  deadline.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    result.timed_out = true;
    (void)(*p)->signal_group(os::group_signal::kill);
  });
  io.run();
  return result;
}

inline process_output run_process(std::vector<std::string> argv,
                                  std::vector<std::pair<std::string, std::string>> env = {},
                                  std::filesystem::path stderr_log = {},
                                  std::chrono::seconds timeout = std::chrono::seconds(120),
                                  std::filesystem::path working_dir = {}) {
  os::spawn_options o;
  o.working_dir = std::move(working_dir);
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.stderr_log = std::move(stderr_log);
  return run_spawned(std::move(o), timeout);
}

// A shell's view of how it ended: the exit code, 128 + the signal, or -1 when it was killed at
// its timeout.
inline int exit_code_of(const process_output& r) {
  if (r.timed_out) return -1;
  return r.status.how == os::exit_status::kind::exited ? r.status.code : 128 + r.status.code;
}

}  // namespace baton::test
