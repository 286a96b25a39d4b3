// `baton run CONFIG`: one job in the foreground with an embedded supervisor, no daemon needed.
// It keeps the job's state in the state directory, so running the same command again resumes
// where a stopped run left off; Ctrl-C asks the worker to checkpoint and stop. It owns the state
// directory while it runs (the lock of os/state_lock.h): on one that a daemon owns it refuses,
// naming the daemon's pid, since the daemon may be running the very same job.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "supervisor/cli.h"

namespace baton::os {
class state_locker;
}

namespace baton::supervisor {

class process_launcher;

void add_run_command(CLI::App& app, cli_context& ctx);

struct run_options {
  std::string config;
  std::string state_dir;
  std::string worker;
  bool json = false;
  bool fresh = false;
  // `--dashboard`: the web dashboard for this run, on a loopback listener (http_listener.h).
  bool dashboard = false;
  std::string dashboard_listen = "127.0.0.1:0";
  // `--set PATH=VALUE` overrides of the job file's fields (protocol/job_overrides.h), in order.
  std::vector<std::string> sets;
  bool become_subreaper = true;  // off in tests, whose process must stay as it is
  // Locks the state directory for the run (os/state_lock.h); null: the OS's lock file. Tests on
  // a mem_env pass an in-memory one.
  os::state_locker* locker = nullptr;
};

// `baton run` itself: returns its exit code (0 completed, 130 interrupted, 1 failed, 2 invalid).
// The workers start through `launcher` (tests pass a fake).
int run_job(const run_options& o, cli_context& ctx, process_launcher& launcher);

// The built-in worker: $BATON_WORKER, else baton-worker next to this executable, else the build
// tree's worker/baton-worker beside supervisor/. Empty when none exists.
std::filesystem::path find_worker_executable(os::env& e);

}  // namespace baton::supervisor
