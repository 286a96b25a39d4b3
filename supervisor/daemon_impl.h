// The daemon's engine, shared by its two halves: daemon.cpp (start, recovery, the queue and the
// runners, shutdown, signals) and daemon_api.cpp (one on_call per control API route). Private to
// supervisor/: nothing outside daemon*.cpp includes it. daemon owns the one impl (shared_ptr, so
// handlers posted to the io_context can hold it weakly); impl owns the store, the lock, the
// control server and every job_entry; each job_entry owns its runner while the job runs.
// Everything runs on the io_context's thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "os/peer_credentials.h"
#include "os/process.h"
#include "os/state_lock.h"
#include "protocol/job_spec.h"
#include "supervisor/control_server.h"
#include "supervisor/daemon.h"
#include "supervisor/http_listener.h"
#include "supervisor/job_history.h"
#include "supervisor/job_machine.h"
#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"
#include "supervisor/job_store.h"

namespace baton::supervisor {

// The order jobs are listed and recovered in: oldest submit first, ties by id.
bool created_before(const job_record& a, const job_record& b);

struct daemon::impl : std::enable_shared_from_this<impl> {
  struct job_entry {
    job_record record;  // the truth while no runner exists; refreshed when one comes to rest
    std::optional<protocol::job_spec> spec;
    std::unique_ptr<job_runner> runner;
    // The job's history while its runner feeds it (job_history.h); a job at rest has none in
    // memory and its history is read from its file when asked for.
    std::unique_ptr<job_history> history = {};
    // `baton rm --force` of a running job: cancelled, and removed once its worker is gone.
    bool remove_at_rest = false;
    const job_record& current() const { return runner ? runner->record() : record; }
  };

  impl(boost::asio::io_context& io_, os::env& e_, daemon_options o)
      : io(io_),
        confined_env(confine(e_, o.settings)),
        e(confined_env ? *confined_env : e_),
        options(std::move(o)),
        store(e, options.settings.state_dir),
        started_ms(unix_ms_now()) {
    // Job folders another user owns: a record slot that user wrote is no record.
    if (options.settings.run_as == jobs_run_as::submitter) store.require_record_owner(daemon_uid);
  }

  // With jobs_run_as = "submitter" on the OS's disk: an env that follows no link inside
  // jobs/, whose folders belong to the jobs' users (os::make_no_follow_env). Null otherwise.
  static std::unique_ptr<os::env> confine(os::env& base, const daemon_settings& s);

  boost::asio::io_context& io;
  std::unique_ptr<os::env> confined_env;  // before `e`, which may refer to it
  os::env& e;
  daemon_options options;
  job_store store;
  std::unique_ptr<os::state_lock> lock;  // held from start() until the daemon is destroyed
  std::unique_ptr<control_server> server;
  std::unique_ptr<http_listener> http;  // the read-only /metrics listener, when http_listen is set
  std::optional<boost::asio::signal_set> signals;
  os::containment_report containment = os::current_containment();
  std::unique_ptr<os::child_reaper> reaper;  // escapees re-parented to us are reaped at once
  bool owns_containment = false;             // set it up, so removes its cgroups at the end
  std::map<std::string, job_entry> jobs;
  std::deque<std::string> queue;
  std::size_t running = 0;
  bool stopping = false;
  bool finished = false;
  std::string last_status;
  std::string newest_progress_id;  // the running job that last reported anything
  // The history of the job at rest that was read last, kept while its file keeps its size: a
  // dashboard open on a finished job asks every second, and a reload parses up to a few MiB on
  // the io thread each time.
  struct rest_history {
    std::string id;
    std::uint64_t file_size = 0;
    std::unique_ptr<job_history> history;
  } rest_history_cache;
  // When a worker's report last refreshed the status line: reports come many times a second
  // per job, the line (sd_notify STATUS=, a datagram) at most once a second from them.
  std::chrono::steady_clock::time_point progress_published = {};
  std::int64_t started_ms;
  std::uint32_t daemon_uid = os::current_uid();

  // ----- lifecycle (daemon.cpp) ----------------------------------------------------------
  void log(log_level level, const std::string& message);
  // A job without a runner takes its events here; the FIFO follows what the machine asks.
  rest_outcome feed(job_record& r, const event& ev);
  status recover();
  void publish_status();
  void start_next();
  void start_runner(const std::string& id);
  void on_rest(const std::string& id);
  void shutdown();
  void shutdown_now();
  void maybe_finish();
  void finish(int code);
  void reload();
  void wait_signal();
  void on_signal(int sig);
  void install_signals();

  // ----- the control API (daemon_api.cpp) ------------------------------------------------
  job_entry* find(const std::string& id);
  api_response no_job(const std::string& id);
  nlohmann::json status_of(const job_entry& j);
  // Per-job calls (every call with an `id`) reach their on_call only once check_job_access
  // (job_access.h) let the caller through: daemon::handle checks before dispatching. The calls
  // that span jobs take the caller to decide what it may see.
  api_response on_call(const submit_call& c, const api_caller& caller);
  api_response on_call(const list_call&, const api_caller& caller);
  api_response on_call(const status_call& c);
  api_response on_call(const logs_call& c);
  api_response on_call(const cancel_call& c);
  // A paused job resumes: the daemon pauses a job whose checkpoint or record cannot be saved
  // (a full disk), and nothing but the user knows when space is back. A failed one too, from its
  // newest verified checkpoint: the user may have fixed what failed it.
  api_response on_call(const resume_call& c);
  api_response on_call(const health_call&);
  api_response on_call(const history_call& c);
  api_response on_call(const metrics_call&);
  api_response on_call(const remove_call& c);
  api_response on_call(const prune_call& c, const api_caller& caller);
  api_response on_call(const dashboard_call&, const api_caller& caller);
  // Drops a job at rest: out of the queue, its folder deleted, forgotten. An error (the folder
  // could not be deleted) leaves the job listed, so nothing is half-forgotten.
  status remove_job(const std::string& id);
};

}  // namespace baton::supervisor
