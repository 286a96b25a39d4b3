// The job runner's door to worker processes, so tests can replace real workers with scripted
// fakes (tests/support/fake_launcher.h). A `worker_process` is one running worker as the runner
// sees it: its stdout lines, its stdin, its exit, its memory, and a way to kill it with everything
// it started. A `process_launcher` starts them. The real launcher (os_process_launcher()) wraps
// os::spawn (os/process.h); it is process-wide and never destroyed. The runner owns each
// worker_process; destroying one kills a worker that still runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/process.h"

namespace baton::supervisor {

class worker_process {
 public:
  virtual ~worker_process() = default;
  virtual std::int64_t pid() const = 0;
  // As os::process: see os::line_handler for the calls it makes. Call once.
  virtual void async_read_lines(os::line_handler on_line) = 0;
  virtual void async_write_line(std::string line, os::write_handler on_done) = 0;
  // As os::process::read_unpaced.
  virtual void read_unpaced() = 0;
  // Calls `on_exit` once, when the worker has exited. Call once.
  virtual void async_wait(os::exit_handler on_exit) = 0;
  // Resident memory of the worker and all its descendants, in bytes.
  virtual result<std::uint64_t> rss_bytes() const = 0;
  // Kills the worker's process group, its descendants that left the group, and the orphans it
  // left behind (found by the BATON_JOB_DIR it was started with). The error is the group
  // signal's; the other two are best effort.
  virtual status kill_tree() = 0;
};

// A job's fork server (worker.preload, os/preload_server.h) as the runner sees it. The runner
// owns it; destroying it ends the server, never a shard it forked.
class preload_parent {
 public:
  virtual ~preload_parent() = default;
  virtual std::int64_t pid() const = 0;
  // Calls `on_ready` once the server has imported its modules, or with why not
  // (os::preload_server::async_wait_ready).
  virtual void async_wait_ready(std::chrono::milliseconds timeout,
                                std::function<void(status)> on_ready) = 0;
  // A shard forked from the server, as spawn would start it (options.argv: [python, script, ...]).
  virtual result<std::unique_ptr<worker_process>> fork(boost::asio::io_context& io,
                                                       const os::spawn_options& options,
                                                       std::chrono::milliseconds timeout) = 0;
  // False once the server exited or failed: start another.
  virtual bool usable() const = 0;
};

class process_launcher {
 public:
  virtual ~process_launcher() = default;
  virtual result<std::unique_ptr<worker_process>> spawn(boost::asio::io_context& io,
                                                        const os::spawn_options& options) = 0;
  // Starts a fork server importing `modules`; options.argv is the interpreter. The default (a
  // launcher of scripted fakes) has none.
  virtual result<std::unique_ptr<preload_parent>> start_preload(
      boost::asio::io_context& io, const os::spawn_options& options,
      const std::vector<std::string>& modules);
};

// Real processes through os::spawn.
process_launcher& os_process_launcher();

// Chooses how the workers of a supervisor of `state_dir` are held (os::setup_containment, keyed
// by the folder's absolute path, which finds and kills what an earlier supervisor of it left).
// BATON_CONTAINMENT=process-group forces the fallback; any other value but "auto" is a warning,
// put in `warning`. Both the daemon and `baton run` call it once, holding the state dir's lock.
os::containment_report set_up_containment(const std::filesystem::path& state_dir,
                                          std::string& warning);

}  // namespace baton::supervisor
