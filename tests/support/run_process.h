// Test helper: runs a program (argv, never a shell) to completion through os::spawn and returns
// its exit status and stdout. Integration tests use it to drive the real `baton` and workers.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
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

inline process_output run_process(std::vector<std::string> argv,
                                  std::vector<std::pair<std::string, std::string>> env = {},
                                  std::filesystem::path stderr_log = {},
                                  std::chrono::seconds timeout = std::chrono::seconds(120),
                                  std::filesystem::path working_dir = {}) {
  boost::asio::io_context io;
  os::spawn_options o;
  o.working_dir = std::move(working_dir);
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.stderr_log = std::move(stderr_log);
  auto p = os::spawn(io, o);
  if (!p) throw std::runtime_error(p.error().message);
  process_output result;
  bool out_done = false;
  bool exited = false;
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (ec && ec != boost::system::errc::message_size) {
      out_done = true;
      if (exited) io.stop();
      return;
    }
    result.out.append(line);
    result.out.push_back('\n');
  });
  (*p)->async_wait([&](const boost::system::error_code&, os::exit_status st) {
    result.status = st;
    exited = true;
    if (out_done) io.stop();
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

}  // namespace baton::test
