// The job state machine, s6 style: one pure function maps (state, event, settings) to a new state
// and a list of actions. It decides everything about one job, from submission to its end: when a
// worker starts, when one is stopped or killed (memory limits, learned budgets, stalls, invalid
// checkpoints, protocol violations), how long to wait before the next one (the 1 s floor between
// spawns, backoff after failures), when a crash loop fails the job, and what a cancel, a pause, a
// resume, a failed save, a daemon restart or a daemon shutdown does to it. Its outcomes are
// honest: a job completes only with a verified checkpoint at its last step; a shard that ends
// without a new checkpoint is a failure; exit code 2 and protocol violations fail the job at
// once with the worker's own words; a full disk (the worker's `error` or a supervisor save)
// pauses it, and a failed job can be resumed like a paused one.
//
// It never touches the OS, a clock or Asio. Its state has two parts: `job_standing`, which is the
// job record's own persisted fields (job_record.h), and `job_runtime`, what only lives in memory
// (the current worker, budgets learned from hard kills, the backoff position). The job runner
// (job_runner.h) owns both for a job with a worker; the daemon and `baton run` own the record of a
// job at rest (see feed_job_at_rest). They feed events, carry out the returned actions in order,
// and store the returned state; nothing else writes a job's state.
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

// Where the current worker is while the job is `running`; `none` in every other state.
enum class worker_phase {
  none,
  starting,  // spawn asked for or done, no hello yet
  running,   // the worker said hello
  stopping,  // stop sent or group killed; waiting for the exit
};

// Where a stopping worker's job goes once the worker is gone. `fail`: the worker broke the
// protocol, which a new worker of the same trainer would do again; the job fails at once.
enum class stop_target { none, restart, pause, fail, cancel };

// `restart` delays the next worker: the planned wait (waiting) or the backoff after a failure.
enum class timer_kind { stall, grace, restart, budget };

// The in-memory part of the machine's state. A job at rest (no runner) has the default one.
struct job_runtime {
  worker_phase phase = worker_phase::none;
  bool worker_alive = false;
  std::optional<std::int64_t> last_spawn_ms;  // when the current/last worker was spawned
  std::int64_t progress_step = 0;             // last step the worker reported
  std::int64_t shard_start_step = 0;          // checkpoint the current worker started from
  // Learned from a hard-limit kill: how many steps a worker may run before it is asked to
  // checkpoint and stop, so the next worker stops before the limit instead of losing its work.
  std::optional<std::int64_t> step_budget;
  // The same lesson in time, for workers that report progress rarely: a worker is asked to stop
  // this long after its hello. Counted from the hello, not the spawn: a trainer's start-up
  // (`import torch`, seconds, and longer on a loaded machine) is not training time, and a
  // budget that includes it stops a slow starter before its first step.
  std::optional<std::int64_t> time_budget_ms;
  std::optional<std::int64_t> hello_ms;  // when the current worker said hello
  // Hard-limit kills since the checkpoint last advanced.
  int hard_kills_without_progress = 0;
  // The checkpoint step at which the consecutive failures (job_standing) happened. Unset after a
  // restart of the supervisor: the persisted failures then count at the current checkpoint.
  std::optional<std::int64_t> failure_step;
  int backoff_attempt = 0;  // index into the backoff sequence; 0 after a success
  int workers_started = 0;
  // Set while stopping: why we stopped the worker and where the job goes next.
  stop_target target = stop_target::none;
  std::optional<exit_cause> stop_cause;
  std::string stop_detail;   // e.g. "invalid checkpoint: digest mismatch"
  std::string pause_reason;  // the diagnosis the job gets once a pausing worker is gone
  std::string worker_error;  // the current worker's last `error` message, for the diagnosis
  bool kill_sent = false;
  // The current worker's newest memory sample; unset until its first.
  std::optional<std::uint64_t> rss_bytes;
  // A next worker was started ahead (act::start_ahead) and not yet used or dropped.
  bool ahead = false;
  // The current worker's first progress report, step and clock: the pace its shard's end is
  // foreseen at (shard_end_watch_ms).
  std::optional<std::int64_t> pace_step;
  std::int64_t pace_ms = 0;
  bool unpaced = false;  // act::read_unpaced sent for the current worker
  friend bool operator==(const job_runtime&, const job_runtime&) = default;
};

namespace ev {
// ----- the job's life, fed by the daemon and `baton run` -----
struct submitted {};  // a new job, just created queued by the job store
// Fed once per job found in the state directory when a supervisor starts. `shard_open`: the
// newest shard has no exit cause (its worker died with the previous supervisor).
struct recovered {
  bool shard_open = false;
};
// The job's record or spec cannot be loaded at recovery: the job stays listed, failed, with
// `diagnosis`.
struct unloadable {
  std::string diagnosis;
  bool shard_open = false;
};
// The daemon is going away: a job that is not finished is left queued for the next daemon.
// `shard_open`: its worker was killed with no exit recorded (a forced stop).
struct requeued_for_restart {
  bool shard_open = false;
};
// A verified checkpoint on disk newer than the record (a supervisor killed between saving a
// checkpoint and its record); fed before a job starts. `replaces`: the record's own checkpoint
// file is gone or no longer verifies, and this (possibly older, 0: none) is the newest that does.
struct checkpoint_found {
  std::int64_t step = 0;
  bool replaces = false;
};
struct start_requested {};  // a worker slot is free for this job
// The checkpoint the worker being spawned resumes from, verified just before its spawn. Lower
// than the record's step when a newer checkpoint was damaged since it was written.
struct resume_point {
  std::int64_t step = 0;
};
struct cancel_requested {};
struct pause_requested {
  std::string reason;
};
// `failed_too`: a failed or cancelled job resumes as well (`baton resume`), from its newest
// verified checkpoint, with its failure count cleared; without it only a paused job resumes (`baton
// run`).
struct resume_requested {
  bool failed_too = false;
};
// A record save failed; `reason` is the store's error (empty: unknown).
struct save_failed {
  std::string reason;
};

// ----- the current worker, fed by the job runner -----
struct worker_spawned {
  std::int64_t now_ms = 0;
};
struct spawn_failed {
  std::string message;
  std::int64_t now_ms = 0;
};
struct hello {
  std::int64_t now_ms = 0;  // the clock of worker_spawned
};
struct progress {
  std::int64_t step = 0;
  // The step the worker's shard ends at (its progress message's shard_end_step), given only
  // where the job goes on after it: there the worker saves, and a next worker follows.
  std::optional<std::int64_t> shard_end_step;
  std::int64_t now_ms = 0;  // the clock of worker_spawned, when the report was read
};
struct checkpoint_verified {
  std::int64_t step = 0;
};
// A checkpoint the worker reported does not verify (wrong folder, digest, step, undecodable).
struct checkpoint_rejected {
  std::string reason;
};
// The worker broke the protocol: a hello with a version we do not speak, or a line that is a
// message of a known type but breaks its schema ("step":"40"). Deterministic: the job fails.
struct protocol_violation {
  std::string reason;
};
// The worker's `error` message. One that names a full disk or quota (ENOSPC, EDQUOT) pauses the
// job instead of failing it; any other is the worker's own words for the diagnosis of its exit.
struct worker_error {
  std::string message;
};
struct rss_sample {
  std::uint64_t bytes = 0;
};
struct stall_timeout {};
struct worker_exited {
  // The three facts every exit has; the rest are set by name where known.
  worker_exited(os::exit_status st = {}, std::optional<protocol::done_msg> done = std::nullopt,
                std::int64_t now = 0)
      : status(st), last_done(std::move(done)), now_ms(now) {}
  os::exit_status status;
  std::optional<protocol::done_msg> last_done;  // the worker's last `done` message, if any
  std::int64_t now_ms = 0;
  // The job's total steps as known now (0: unknown). A job completes only when its newest
  // verified checkpoint is at (or past) this step.
  std::int64_t total_steps = 0;
  // The end of what the worker wrote on stderr, for the diagnosis when it sent no `error`.
  std::string stderr_tail;
  // Set when the record's checkpoint file was gone after the worker (a worker that pruned or
  // removed it): the newest checkpoint that verified then, 0 for none.
  std::optional<std::int64_t> checkpoint_now;
};
struct restart_due {};  // the restart timer (waiting or backoff) ran out
struct budget_elapsed {};
struct grace_elapsed {};
}  // namespace ev

using event =
    std::variant<ev::submitted, ev::recovered, ev::unloadable, ev::requeued_for_restart,
                 ev::checkpoint_found, ev::start_requested, ev::resume_point, ev::cancel_requested,
                 ev::pause_requested, ev::resume_requested, ev::save_failed, ev::worker_spawned,
                 ev::spawn_failed, ev::hello, ev::progress, ev::checkpoint_verified,
                 ev::checkpoint_rejected, ev::protocol_violation, ev::worker_error, ev::rss_sample,
                 ev::stall_timeout, ev::worker_exited, ev::restart_due, ev::budget_elapsed,
                 ev::grace_elapsed>;

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
struct record_exit {  // close the current shard in the record's history
  exit_cause cause = exit_cause::completed;
  os::exit_status status;
  std::string detail;
  friend bool operator==(const record_exit&, const record_exit&) = default;
};
// Close a shard whose worker died with an earlier supervisor (no exit status is known): its
// cause is `stopped`, it is not a failure of the job.
struct close_interrupted_shard {
  std::string detail;
  friend bool operator==(const close_interrupted_shard&, const close_interrupted_shard&) = default;
};
struct log_event {  // a line for the job's log: "job completed", "job paused: disk full"
  std::string message;
  friend bool operator==(const log_event&, const log_event&) = default;
};
// The job is queued and wants a worker slot: the daemon appends it to its FIFO; a runner, which
// holds a slot already, starts it at once (start_requested).
struct request_slot {
  friend bool operator==(const request_slot&, const request_slot&) = default;
};
struct persist {  // write the job record durably before anything else happens
  friend bool operator==(const persist&, const persist&) = default;
};
// Start the next worker now, while the current one saves: it sets up (data, model, its memory
// faulted in) and waits; the next spawn_worker with the same max_steps uses it instead of a new
// process (protocol/README.md, "Starting ahead").
struct start_ahead {
  std::optional<std::int64_t> max_steps;
  friend bool operator==(const start_ahead&, const start_ahead&) = default;
};
struct drop_ahead {  // kill the worker started ahead: no spawn follows the current worker now
  friend bool operator==(const drop_ahead&, const drop_ahead&) = default;
};
// Read the current worker's reports as they come, no longer in paced batches: its shard's end
// is near, and the report of its last step starts the next worker ahead (start_ahead).
struct read_unpaced {
  friend bool operator==(const read_unpaced&, const read_unpaced&) = default;
};
}  // namespace act

using action = std::variant<act::spawn_worker, act::send_stop, act::kill_group, act::start_timer,
                            act::cancel_timer, act::record_exit, act::close_interrupted_shard,
                            act::log_event, act::request_slot, act::persist, act::start_ahead,
                            act::drop_ahead, act::read_unpaced>;

struct machine_settings {
  protocol::memory_spec memory;
  protocol::restart_spec restart;
  protocol::worker_spec worker;
  // s6: at least 1 s between two spawns, unless the last worker got a new checkpoint out.
  std::int64_t min_restart_interval_ms = 1000;
  // Whether the job's next worker is started ahead (worker.start_ahead, BATON_START_AHEAD).
  bool start_ahead = false;
  // How long before the current worker's last step its reports are read unpaced
  // (act::read_unpaced), so that the report of that step, which starts the next worker ahead,
  // is read at once. Read in paced batches, it can be a read pace late, and the save it should
  // overlap is over by then: the next worker's set-up then decides the switch. The worker's own
  // report interval (100 ms for the built-in trainer) with room to spare; the runner adds its
  // read pace. Not earlier: a set-up that overlaps training takes a core from it. Measured on
  // two cores (shard_switch_bench, the shards' edges timed apart): starting it one report, up
  // to 120 ms, before the last step made a switch 95 ms against 68.
  std::int64_t shard_end_watch_ms = 200;
  // The shortest stretch of reports a pace is read from: shorter ones mostly measure how the
  // runner batches its reads.
  static constexpr std::int64_t min_pace_window_ms = 200;

  static machine_settings from(const protocol::job_spec& spec);
};

struct transition_result {
  job_standing standing;
  job_runtime runtime;
  std::vector<action> actions;  // to carry out in this order
  bool ignored = false;         // the event means nothing in this state (worth a debug log)
};

transition_result transition(const job_standing& standing, const job_runtime& runtime,
                             const event& e, const machine_settings& cfg);

// The finer state, for logs and tests: a running job's worker phase ("starting", "running",
// "stopping"), otherwise the job state's own name.
std::string_view phase_name(const job_standing& standing, const job_runtime& runtime);
std::string_view to_string(worker_phase p);
std::string_view to_string(timer_kind k);

}  // namespace baton::supervisor
