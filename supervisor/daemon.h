// The daemon is the long-running supervisor behind `baton serve`: it owns the job store, a FIFO
// queue of jobs waiting for a slot, one job_runner per running job (at most max_workers), and the
// control server that feeds it API calls. It recovers every job from the state directory at
// start, and on shutdown asks every worker to checkpoint and persists those jobs as queued so the
// next daemon resumes them. The caller owns the io_context and runs it; everything here happens
// on that one thread (the server's handler calls included).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/env.h"
#include "os/state_lock.h"
#include "supervisor/control_api.h"
#include "supervisor/daemon_settings.h"
#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"
#include "supervisor/process_launcher.h"

namespace baton::supervisor {

// Hooks for a service manager (systemd's sd_notify: READY=1, STATUS=..., RELOADING=1,
// STOPPING=1). All may be empty; all run on the io thread.
struct daemon_hooks {
  std::function<void()> on_ready;  // recovered and serving
  // "2 running, 3 queued; mnist-1 step 120/400 loss 0.31", on every change (progress too).
  std::function<void(const std::string&)> on_status;
  std::function<void()> on_reloading;                      // SIGHUP received
  std::function<void()> on_reloaded;                       // reload applied (or refused)
  std::function<void()> on_stopping;                       // shutdown began
  std::function<void(int exit_code)> on_stopped;           // every job at rest; default io.stop()
  std::function<void(log_level, const std::string&)> log;  // default: stderr, filtered by level
};

struct daemon_options {
  // Resolved: state_dir and socket must be set (the serve command fills defaults).
  daemon_settings settings;
  std::filesystem::path worker_exe;  // the built-in worker; empty: jobs must set worker.command
  // Starts the workers. Not owned; must outlive the daemon. Tests pass a fake.
  process_launcher* launcher = &os_process_launcher();
  // Re-reads settings on SIGHUP (file plus command-line overrides). Empty: SIGHUP is logged only.
  std::function<result<daemon_settings>()> reload_settings;
  // Takes the state directory's lock (os/state_lock.h) for the daemon's life. Not owned; must
  // outlive the daemon. Tests on a mem_env pass an in-memory one.
  os::state_locker* locker = &os::os_state_locker();
  bool handle_signals = true;  // SIGTERM/SIGINT shut down (twice: at once), SIGHUP reloads
  bool become_subreaper = true;
  daemon_hooks hooks;
};

class daemon final : public api_handler {
 public:
  daemon(boost::asio::io_context& io, os::env& e, daemon_options options);
  ~daemon() override;  // kills any worker still running
  daemon(const daemon&) = delete;
  daemon& operator=(const daemon&) = delete;

  // Locks the state directory (failing, with the holder's pid, if another daemon or `baton run`
  // owns it), starts the control server (failing if another daemon answers on the socket), then
  // removes submits a crash left half-written, recovers every job and starts as many as slots
  // allow. Call before running the io_context.
  status start();

  // Graceful shutdown, as on SIGTERM: stop serving, ask every worker to checkpoint and stop,
  // persist those jobs as queued, then call hooks.on_stopped(0).
  void shutdown();
  // As on a second SIGTERM: kill every worker at once, persist as queued, on_stopped(1).
  void shutdown_now();
  // As on SIGHUP: apply max_workers and the log level from reload_settings().
  void reload();

  // As the daemon's own user (privileged).
  api_response handle(const api_call& call) override;
  // As `caller`: a per-job call on a job the caller does not own is answered 403 (job_access.h),
  // `list` and `prune` see only the caller's jobs, and the dashboard's URL is for the privileged.
  api_response handle(const api_call& call, const api_caller& caller) override;

  // For tests and status lines.
  std::size_t running_count() const;
  std::vector<std::string> queued_ids() const;
  bool stopping() const;
  // The longest stop_grace_ms among jobs with a worker: how long a shutdown may still take.
  std::chrono::milliseconds longest_stop_grace() const;
  const daemon_settings& settings() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace baton::supervisor
