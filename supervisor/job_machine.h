// The per-job supervision state machine, s6 style: one pure function maps (state, event,
// settings) to a new state and a list of actions. It never touches the OS, a clock or Asio; the
// daemon's run loop feeds it events (worker lines, exits, RSS samples, timer expiries, user
// requests), carries out the actions in order (spawn, stop, kill, timers, persist) and stores
// the state. Everything the policy decides (memory recycles, crash loops, backoff, the 1 s
// minimum between restarts, exit causes) is decided here and tested as a table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "os/exit_status.h"
#include "protocol/job_spec.h"
#include "protocol/messages.h"
#include "supervisor/job_record.h"

namespace baton::supervisor {

enum class shard_phase {
  queued,     // waiting for the daemon to start it (start_requested)
  starting,   // worker spawn asked for or done, no hello yet
  running,    // worker said hello
  stopping,   // stop sent or group killed; waiting for the exit
  backoff,    // waiting for the backoff timer before the next worker
  completed,  // terminal
  failed,     // terminal: crash loop; see shard_state::diagnosis
  cancelled,  // terminal
  paused,     // waiting for resume_requested (user pause, full disk)
};

// Where a stopping worker's job goes once the worker is gone.
enum class stop_target { none, restart, pause, cancel };

enum class timer_kind { stall, grace, backoff, budget };

struct shard_state {
  shard_phase phase = shard_phase::queued;
  bool worker_alive = false;
  std::optional<std::int64_t> last_spawn_ms;  // when the current/last worker was spawned
  std::int64_t checkpoint_step = 0;           // last verified checkpoint
  std::int64_t progress_step = 0;             // last step the worker reported
  std::int64_t shard_start_step = 0;          // checkpoint the current worker started from
  // Learned from a hard-limit kill: how many steps a worker may run before it is asked to
  // checkpoint and stop, so the next worker stops before the limit instead of losing its work.
  std::optional<std::int64_t> step_budget;
  // The same lesson in time, for workers that report progress rarely: a worker is asked to stop
  // this long after it started.
  std::optional<std::int64_t> time_budget_ms;
  // Hard-limit kills since the checkpoint last advanced.
  int hard_kills_without_progress = 0;
  // Consecutive failures while the checkpoint stayed at failure_step.
  int failures = 0;
  std::int64_t failure_step = 0;
  int backoff_attempt = 0;  // index into the backoff sequence; 0 after a success
  int workers_started = 0;
  // Set while stopping: why we stopped the worker and where the job goes next.
  stop_target target = stop_target::none;
  std::optional<exit_cause> stop_cause;
  std::string stop_detail;  // e.g. "invalid checkpoint: digest mismatch"
  bool kill_sent = false;
  std::string diagnosis;  // why failed or paused
  friend bool operator==(const shard_state&, const shard_state&) = default;
};

namespace ev {
struct start_requested {};
struct worker_spawned {
  std::int64_t now_ms = 0;
};
struct spawn_failed {
  std::string message;
  std::int64_t now_ms = 0;
};
struct hello {};
struct progress {
  std::int64_t step = 0;
};
struct checkpoint_verified {
  std::int64_t step = 0;
};
struct checkpoint_invalid {
  std::string reason;
};
struct rss_sample {
  std::uint64_t bytes = 0;
};
struct stall_timeout {};
struct worker_exited {
  os::exit_status status;
  std::optional<protocol::done_msg> last_done;  // the worker's last `done` message, if any
  std::int64_t now_ms = 0;
};
struct backoff_elapsed {};
struct budget_elapsed {};
struct grace_elapsed {};
struct cancel_requested {};
struct pause_requested {};
struct resume_requested {};
// A record save failed; `reason` is the store's error (empty: unknown).
struct disk_full {
  std::string reason;
};
}  // namespace ev

using event =
    std::variant<ev::start_requested, ev::worker_spawned, ev::spawn_failed, ev::hello, ev::progress,
                 ev::checkpoint_verified, ev::checkpoint_invalid, ev::rss_sample, ev::stall_timeout,
                 ev::worker_exited, ev::backoff_elapsed, ev::budget_elapsed, ev::grace_elapsed,
                 ev::cancel_requested, ev::pause_requested, ev::resume_requested, ev::disk_full>;

namespace act {
struct spawn_worker {
  // The learned step budget for this worker, passed to it (BATON_MAX_STEPS) so it checkpoints
  // and ends exactly there rather than on a stop that arrives a few steps late.
  std::optional<std::int64_t> max_steps;
  friend bool operator==(const spawn_worker&, const spawn_worker&) = default;
};
struct send_stop {  // the protocol's `stop` line on the worker's stdin
  friend bool operator==(const send_stop&, const send_stop&) = default;
};
struct kill_group {  // SIGKILL the worker's process group and descendants
  friend bool operator==(const kill_group&, const kill_group&) = default;
};
struct start_timer {  // replaces a running timer of the same kind
  timer_kind kind = timer_kind::stall;
  std::int64_t ms = 0;
  friend bool operator==(const start_timer&, const start_timer&) = default;
};
struct cancel_timer {  // a cancelled timer must not deliver its event
  timer_kind kind = timer_kind::stall;
  friend bool operator==(const cancel_timer&, const cancel_timer&) = default;
};
struct record_exit {
  exit_cause cause = exit_cause::completed;
  os::exit_status status;
  std::string detail;
  friend bool operator==(const record_exit&, const record_exit&) = default;
};
struct mark_completed {
  friend bool operator==(const mark_completed&, const mark_completed&) = default;
};
struct mark_failed {
  std::string diagnosis;
  friend bool operator==(const mark_failed&, const mark_failed&) = default;
};
struct mark_cancelled {
  friend bool operator==(const mark_cancelled&, const mark_cancelled&) = default;
};
struct mark_paused {
  std::string reason;
  friend bool operator==(const mark_paused&, const mark_paused&) = default;
};
struct persist {  // write the job state durably before anything else happens
  friend bool operator==(const persist&, const persist&) = default;
};
}  // namespace act

using action = std::variant<act::spawn_worker, act::send_stop, act::kill_group, act::start_timer,
                            act::cancel_timer, act::record_exit, act::mark_completed,
                            act::mark_failed, act::mark_cancelled, act::mark_paused, act::persist>;

struct machine_settings {
  protocol::memory_spec memory;
  protocol::restart_spec restart;
  protocol::worker_spec worker;
  std::int64_t min_restart_interval_ms = 1000;  // s6: at least 1 s between two spawns

  static machine_settings from(const protocol::job_spec& spec);
};

struct transition_result {
  shard_state state;
  std::vector<action> actions;  // to carry out in this order
  bool ignored = false;         // the event means nothing in this state (worth a debug log)
};

transition_result transition(const shard_state& s, const event& e, const machine_settings& cfg);

bool is_terminal(shard_phase p);
std::string_view to_string(shard_phase p);
// The state users see: starting and stopping workers are part of `running`.
job_state public_state(shard_phase p);
std::string_view to_string(timer_kind k);

}  // namespace baton::supervisor
