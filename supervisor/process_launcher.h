// The job runner's door to worker processes, so tests can replace real workers with scripted
// fakes (tests/support/fake_launcher.h). A `worker_process` is one running worker as the runner
// sees it: its stdout lines, its stdin, its exit, its memory, and a way to kill it with everything
// it started. A `process_launcher` starts them. The real launcher (os_process_launcher()) wraps
// os::spawn (os/process.h); it is process-wide and never destroyed. The runner owns each
// worker_process; destroying one kills a worker that still runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "os/process.h"
#include "base/status.h"

namespace baton::supervisor {

class worker_process {
 public:
  virtual ~worker_process() = default;
  virtual std::int64_t pid() const = 0;
  // As os::process: see os::line_handler for the calls it makes. Call once.
  virtual void async_read_lines(os::line_handler on_line) = 0;
  virtual void async_write_line(std::string line, os::write_handler on_done) = 0;
  // Calls `on_exit` once, when the worker has exited. Call once.
  virtual void async_wait(os::exit_handler on_exit) = 0;
  // Resident memory of the worker and all its descendants, in bytes.
  virtual result<std::uint64_t> rss_bytes() const = 0;
  // Kills the worker's process group, its descendants that left the group, and the orphans it
  // left behind (found by the BATON_JOB_DIR it was started with). The error is the group
  // signal's; the other two are best effort.
  virtual status kill_tree() = 0;
};

class process_launcher {
 public:
  virtual ~process_launcher() = default;
  virtual result<std::unique_ptr<worker_process>> spawn(boost::asio::io_context& io,
                                                        const os::spawn_options& options) = 0;
};

// Real processes through os::spawn.
process_launcher& os_process_launcher();

}  // namespace baton::supervisor
