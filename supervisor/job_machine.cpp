#include "supervisor/job_machine.h"

#include <algorithm>

#include "supervisor/backoff.h"

namespace baton::supervisor {

namespace {

constexpr std::uint64_t mib = 1024 * 1024;
// A learned time budget never goes below this: a worker needs some time to start and resume.
constexpr std::int64_t min_time_budget_ms = 200;

constexpr const char* interrupted_by_exit = "supervisor exited while the worker ran";
constexpr const char* interrupted_by_force = "killed: the baton daemon was forced to stop";

class step {
 public:
  step(const job_standing& st, const job_runtime& rt, const machine_settings& cfg) : cfg_(cfg) {
    r_.standing = st;
    r_.runtime = rt;
  }

  job_standing& job() { return r_.standing; }
  job_runtime& s() { return r_.runtime; }
  void emit(action a) { r_.actions.push_back(std::move(a)); }
  transition_result ignore() {
    r_.ignored = true;
    return done();
  }
  transition_result done() { return std::move(r_); }

  bool worker_phase() const { return r_.runtime.phase != worker_phase::none; }
  bool in(job_state state) const { return r_.standing.state == state; }
  // A job between two workers: the restart timer runs.
  bool delayed() const { return in(job_state::waiting) || in(job_state::backoff); }

  void spawn() {
    job().state = job_state::running;
    job().diagnosis.clear();
    s().phase = worker_phase::starting;
    s().shard_start_step = job().checkpoint_step;
    s().progress_step = job().checkpoint_step;
    s().worker_alive = false;
    s().target = stop_target::none;
    s().stop_cause.reset();
    s().stop_detail.clear();
    s().pause_reason.clear();
    s().worker_error.clear();
    s().kill_sent = false;
    s().rss_bytes.reset();
    s().pace_step.reset();
    s().unpaced = false;
    emit(act::spawn_worker{s().step_budget});
    s().ahead = false;  // the spawn uses it, or drops it if it does not fit
  }

  void kill(exit_cause cause, std::string detail, stop_target target) {
    set_stop(cause, std::move(detail), target);
    s().phase = worker_phase::stopping;
    if (!s().kill_sent) {
      emit(act::kill_group{});
      s().kill_sent = true;
    }
    emit(act::cancel_timer{timer_kind::grace});
  }

  void ask_stop(exit_cause cause, stop_target target) {
    set_stop(cause, {}, target);
    s().phase = worker_phase::stopping;
    emit(act::send_stop{});
    emit(act::start_timer{timer_kind::grace, cfg_.worker.stop_grace_ms});
  }

  // Stops in progress keep the stronger verdict: a cancel is never downgraded, a failure only
  // becomes a cancel, and a pause is only overridden by a cancel or a failure.
  void set_stop(exit_cause cause, std::string detail, stop_target target) {
    if (s().target == stop_target::cancel) return;
    if (s().target == stop_target::fail && target != stop_target::cancel) return;
    if (s().target == stop_target::pause && target == stop_target::restart) {
      s().stop_cause = cause;  // a pause that turns into a kill records why it was killed
      s().stop_detail = std::move(detail);
      return;
    }
    s().target = target;
    s().stop_cause = cause;
    s().stop_detail = std::move(detail);
  }

  // Every way out of `running` passes here: the worker is gone.
  void leave_worker(job_state next) {
    job().state = next;
    s().phase = worker_phase::none;
    s().worker_alive = false;
    s().rss_bytes.reset();
    if (s().ahead) {
      emit(act::drop_ahead{});
      s().ahead = false;
    }
  }

  // A progress report on the way to the shard's end, where more shards follow: near it, read
  // the worker's reports unpaced; at it, start the next worker ahead.
  void toward_shard_end(const ev::progress& e) {
    if (!s().pace_step) {
      s().pace_step = e.step;
      s().pace_ms = e.now_ms;
    }
    if (!e.shard_end_step || !cfg_.start_ahead) return;
    const auto left = *e.shard_end_step - e.step;
    if (left <= 0) {
      maybe_start_ahead();
      return;
    }
    if (s().unpaced) return;
    const auto steps = e.step - *s().pace_step;
    const auto ms = e.now_ms - s().pace_ms;
    if (steps <= 0 || ms < machine_settings::min_pace_window_ms) return;
    // In doubles: steps times milliseconds can pass 2^63 for a long shard.
    if (static_cast<double>(left) * static_cast<double>(ms) <=
        static_cast<double>(cfg_.shard_end_watch_ms) * static_cast<double>(steps)) {
      s().unpaced = true;
      emit(act::read_unpaced{});
    }
  }

  // At the end of a shard that more shards follow: the worker saves now, so the next one sets
  // up meanwhile. Only while nothing else is under way (a stop, a kill), and only where
  // two workers fit in the job's memory limit at once, judged by the current worker's newest
  // sample (a fresh worker holds at most what this one does; a leaky one near its limit gets no
  // companion).
  void maybe_start_ahead() {
    if (!cfg_.start_ahead || s().ahead || s().phase != worker_phase::running ||
        s().target != stop_target::none) {
      return;
    }
    const auto& m = cfg_.memory;
    const auto limit = m.soft_limit_mib ? m.soft_limit_mib : m.hard_limit_mib;
    if (limit) {
      if (!s().rss_bytes || 2 * *s().rss_bytes > static_cast<std::uint64_t>(*limit) * mib) return;
    }
    s().ahead = true;
    emit(act::start_ahead{s().step_budget});
  }

  void pause(std::string reason) {
    leave_worker(job_state::paused);
    s().target = stop_target::none;
    s().pause_reason.clear();
    job().diagnosis = reason;
    emit(act::log_event{"job paused: " + reason});
    emit(act::persist{});
  }

  void cancel() {
    leave_worker(job_state::cancelled);
    job().diagnosis.clear();
    emit(act::log_event{"job cancelled"});
    emit(act::persist{});
  }

  void fail_job(std::string diagnosis) {
    leave_worker(job_state::failed);
    job().diagnosis = std::move(diagnosis);
    emit(act::log_event{"job failed: " + job().diagnosis});
    emit(act::persist{});
  }

  // Next worker after one that ended without failing (shard done, memory recycle): at once.
  // The spawn floor (min_restart_interval_ms since the last spawn) guards against a respawn
  // loop, and a worker that got a new checkpoint out is not one: each of its turns moved the
  // job on. Short shards of a fast trainer would otherwise wait up to a second each.
  void restart_clean(std::int64_t now_ms, bool progressed) {
    const auto wait = progressed ? 0 : restart_floor(now_ms);
    if (wait > 0) {
      leave_worker(job_state::waiting);
      emit(act::start_timer{timer_kind::restart, wait});
      emit(act::persist{});
    } else {
      emit(act::persist{});
      spawn();
    }
  }

  void fail(std::string_view verb, const std::string& detail, std::int64_t now_ms) {
    auto& failures = job().consecutive_failures;
    const auto at = job().checkpoint_step;
    if (failures == 0 || s().failure_step.value_or(at) != at) {
      failures = 1;
    } else {
      ++failures;
    }
    s().failure_step = at;
    if (failures >= cfg_.restart.max_failures) {
      fail_job(std::string(verb) + " " + std::to_string(failures) + " times at step " +
               std::to_string(at) + ": " + detail);
      return;
    }
    const auto delay = std::max(backoff_delay_ms(backoff_from(cfg_.restart), s().backoff_attempt),
                                restart_floor(now_ms));
    ++s().backoff_attempt;
    leave_worker(job_state::backoff);
    emit(act::start_timer{timer_kind::restart, delay});
    emit(act::persist{});
  }

  std::int64_t restart_floor(std::int64_t now_ms) const {
    if (!r_.runtime.last_spawn_ms) return 0;
    return std::max<std::int64_t>(
        0, cfg_.min_restart_interval_ms - (now_ms - *r_.runtime.last_spawn_ms));
  }

  const machine_settings& cfg() const { return cfg_; }

 private:
  const machine_settings& cfg_;
  transition_result r_;
};

// "exit code 2: <what the worker said>", or the exit alone when it said nothing.
std::string with_words(const std::string& what, const std::string& said) {
  return said.empty() ? what : what + ": " + said;
}

void on_exit(step& t, const ev::worker_exited& e) {
  auto& s = t.s();
  auto& job = t.job();
  s.worker_alive = false;
  t.emit(act::cancel_timer{timer_kind::stall});
  t.emit(act::cancel_timer{timer_kind::grace});
  // The record's checkpoint went away with the worker: the newest that still verifies counts.
  if (e.checkpoint_now) job.checkpoint_step = *e.checkpoint_now;
  const std::string said = !s.worker_error.empty() ? s.worker_error : e.stderr_tail;
  const bool clean = e.status.success() && e.last_done.has_value();
  const bool claims_complete = clean && e.last_done->job_complete;
  const bool verified_at_end =
      e.total_steps > 0 && job.checkpoint_step > 0 && job.checkpoint_step >= e.total_steps;
  if (claims_complete && verified_at_end) {
    // The job is done even if a stop or cancel was on its way: the work exists.
    t.emit(act::record_exit{exit_cause::completed, e.status, {}});
    t.leave_worker(job_state::completed);
    job.diagnosis.clear();
    t.emit(act::log_event{"job completed"});
    t.emit(act::persist{});
    return;
  }
  const auto target = s.target;
  if (target == stop_target::cancel) {
    t.emit(act::record_exit{exit_cause::cancelled, e.status, {}});
    t.cancel();
    return;
  }
  if (target == stop_target::fail) {
    // Whatever it claimed after breaking the protocol, the violation decides.
    t.emit(act::record_exit{s.stop_cause.value_or(exit_cause::crashed), e.status, s.stop_detail});
    t.fail_job(s.stop_detail);
    return;
  }
  if (claims_complete) {
    // A `done` that says the job is complete proves nothing: only a verified checkpoint at the
    // last step does. A worker that claims it without one would claim it again.
    const std::string total =
        e.total_steps > 0 ? std::to_string(e.total_steps) : "an unknown total";
    const std::string detail =
        "the worker said the job is complete at step " + std::to_string(e.last_done->step) +
        ", but the newest verified checkpoint is at step " + std::to_string(job.checkpoint_step) +
        " of " + total +
        (job.checkpoint_step == 0 ? " (it reported no checkpoint that verified)" : "");
    t.emit(act::record_exit{exit_cause::crashed, e.status, detail});
    t.fail_job(detail);
    return;
  }
  if (target == stop_target::pause) {
    t.emit(act::record_exit{s.stop_cause.value_or(exit_cause::stopped), e.status, s.stop_detail});
    t.pause(s.pause_reason);
    return;
  }
  const bool progressed = job.checkpoint_step > s.shard_start_step;
  if (e.status == os::exit_status::exited(2)) {
    // Exit 2 is the protocol's "bad invocation, spec, data or checkpoint": a new worker would
    // fail the same way, so the job fails now, in the worker's own words.
    const auto detail = with_words(e.status.describe(), said);
    t.emit(act::record_exit{exit_cause::crashed, e.status, detail});
    t.fail_job(detail);
    return;
  }
  if (!e.status.success() && !s.stop_cause && protocol::names_no_space(said)) {
    // A worker that died of a full disk: nothing but the user knows when space is back.
    t.emit(act::record_exit{exit_cause::crashed, e.status, with_words(e.status.describe(), said)});
    t.pause("disk full: " + said);
    return;
  }
  if (target == stop_target::restart && s.stop_cause &&
      (*s.stop_cause == exit_cause::memory_soft || *s.stop_cause == exit_cause::memory_budget) &&
      !progressed) {
    // A recycle is the plan working only if the worker got a checkpoint out before it stopped;
    // one that never does would be recycled forever.
    const auto detail =
        (s.stop_detail.empty() ? std::string(to_string(*s.stop_cause)) : s.stop_detail) +
        ", no new checkpoint since step " + std::to_string(s.shard_start_step);
    t.emit(act::record_exit{*s.stop_cause, e.status, detail});
    t.fail("stopped without a new checkpoint", detail, e.now_ms);
    return;
  }
  if (target == stop_target::restart && s.stop_cause) {
    const auto cause = *s.stop_cause;
    const auto detail = s.stop_detail;
    t.emit(act::record_exit{cause, e.status, detail});
    if (cause == exit_cause::memory_hard) {
      // A hard kill loses the work since the checkpoint, and a fresh worker leaks the same way.
      // Plan later workers to stop at 3/4 of the steps (and of the time) this one got through,
      // so the loss happens once, not every shard.
      const auto steps_done = s.progress_step - s.shard_start_step;
      if (steps_done > 0) {
        const auto steps = std::max<std::int64_t>(1, steps_done * 3 / 4);
        s.step_budget = s.step_budget ? std::min(*s.step_budget, steps) : steps;
      }
      // The time it trained, from its hello (a worker killed before its hello teaches none).
      if (s.hello_ms) {
        const auto ms =
            std::max<std::int64_t>(min_time_budget_ms, (e.now_ms - *s.hello_ms) * 3 / 4);
        s.time_budget_ms = s.time_budget_ms ? std::min(*s.time_budget_ms, ms) : ms;
      }
      // Not a crash, but a job whose workers cannot reach a checkpoint within the hard limit can
      // never progress: after max_failures such kills in a row it fails instead of looping.
      if (++s.hard_kills_without_progress >= t.cfg().restart.max_failures) {
        t.fail_job("killed at the hard memory limit " +
                   std::to_string(s.hard_kills_without_progress) + " times at step " +
                   std::to_string(job.checkpoint_step) +
                   " without a new checkpoint: raise memory.hard_limit_mib");
        return;
      }
      t.restart_clean(e.now_ms, progressed);  // a recycle is the plan working, never a crash
    } else if (cause == exit_cause::memory_soft || cause == exit_cause::memory_budget) {
      t.restart_clean(e.now_ms, progressed);
    } else {
      t.fail(cause == exit_cause::stalled ? "stalled" : "crashed", detail, e.now_ms);
    }
    return;
  }
  const bool stopped_outside = e.status == os::exit_status::exited(3) && e.last_done;
  if ((clean || stopped_outside) && !progressed) {
    // A shard that ends without a new checkpoint did nothing; the next worker would start from
    // the same step. Counted as a failure, so it backs off and ends, never a 1 s respawn loop.
    // Stopped from outside, nothing was lost, so it is recorded as stopped, not crashed: a
    // service manager signals the daemon's whole control group, so a worker still restoring
    // when the daemon is stopped lands here before the daemon's own pause does.
    const auto at = std::to_string(e.last_done->step);
    const auto past = std::to_string(s.shard_start_step);
    const auto detail = stopped_outside ? "stopped by a signal from outside at step " + at +
                                              ", no checkpoint past step " + past
                                        : "done at step " + at + " (" + e.status.describe() +
                                              ") with no checkpoint past step " + past;
    t.emit(act::record_exit{stopped_outside ? exit_cause::stopped : exit_cause::crashed, e.status,
                            detail});
    t.fail(stopped_outside ? "stopped from outside without a new checkpoint"
                           : "ended its shard without a new checkpoint",
           detail, e.now_ms);
    return;
  }
  if (stopped_outside) {
    // Exit 3 after `done` is the protocol's "stopped cleanly after a checkpoint": somebody else
    // (an admin's SIGTERM) stopped it. Nothing was lost, so it is not a crash.
    t.emit(act::record_exit{exit_cause::stopped, e.status, "stopped by a signal from outside"});
    t.restart_clean(e.now_ms, progressed);
    return;
  }
  if (clean) {
    t.emit(act::record_exit{exit_cause::completed, e.status, {}});
    t.restart_clean(e.now_ms, progressed);  // shard done: resumes from its checkpoint
    return;
  }
  std::string detail = e.status.describe();
  if (e.status.success()) detail += " without a done message";
  detail = with_words(detail, said);
  t.emit(act::record_exit{exit_cause::crashed, e.status, detail});
  t.fail("crashed", detail, e.now_ms);
}

// A pause asked for by the user or the daemon, or forced by a failed save.
transition_result on_pause(step& t, std::string reason) {
  auto& s = t.s();
  if (t.in(job_state::paused)) return t.ignore();
  if (t.worker_phase() && s.worker_alive) {
    if (s.target == stop_target::cancel || s.target == stop_target::pause ||
        s.target == stop_target::fail) {
      return t.ignore();
    }
    s.pause_reason = std::move(reason);
    if (s.phase == worker_phase::stopping) {
      s.target = stop_target::pause;  // a stop is already on its way; land in paused
    } else {
      t.ask_stop(exit_cause::stopped, stop_target::pause);
    }
  } else if (s.phase == worker_phase::starting) {
    if (s.target == stop_target::cancel) return t.ignore();
    s.target = stop_target::pause;  // spawn under way: its outcome event finishes this
    s.pause_reason = std::move(reason);
  } else {
    if (t.delayed()) t.emit(act::cancel_timer{timer_kind::restart});
    t.pause(std::move(reason));
  }
  return t.done();
}

}  // namespace

machine_settings machine_settings::from(const protocol::job_spec& spec) {
  machine_settings m;
  m.memory = spec.memory;
  m.restart = spec.restart;
  m.worker = spec.worker;
  m.start_ahead =
      spec.worker.start_ahead.value_or(!spec.worker.command) && spec.worker.preload.empty();
  return m;
}

transition_result transition(const job_standing& standing, const job_runtime& runtime,
                             const event& event, const machine_settings& cfg) {
  step t(standing, runtime, cfg);
  auto& s = t.s();
  auto& job = t.job();
  if (is_terminal(job.state)) {
    // A failed or cancelled job is at rest like the others, but `baton resume` may run it again
    // (the disk that filled up has room now, the data was fixed, the cancel was a mistake): from
    // its newest verified checkpoint, with the failure count and the backoff starting over. A
    // completed job has nothing left to run.
    const auto* r = std::get_if<ev::resume_requested>(&event);
    if (!r || !r->failed_too || !(t.in(job_state::failed) || t.in(job_state::cancelled)) ||
        t.worker_phase()) {
      return t.ignore();
    }
    t.emit(act::log_event{"job resumed at step " + std::to_string(job.checkpoint_step) +
                          (t.in(job_state::failed) ? " (it had failed: " + job.diagnosis + ")"
                                                   : std::string(" (it had been cancelled)"))});
    job.state = job_state::queued;
    job.diagnosis.clear();
    job.consecutive_failures = 0;
    s.failure_step.reset();
    s.backoff_attempt = 0;
    s.hard_kills_without_progress = 0;
    s.target = stop_target::none;
    t.emit(act::persist{});
    t.emit(act::request_slot{});
    return t.done();
  }

  return std::visit(
      [&](const auto& e) -> transition_result {
        using E = std::decay_t<decltype(e)>;
        // ----- the job's life -----
        if constexpr (std::is_same_v<E, ev::submitted>) {
          if (!t.in(job_state::queued) || t.worker_phase() || s.workers_started > 0) {
            return t.ignore();
          }
          t.emit(act::request_slot{});
        } else if constexpr (std::is_same_v<E, ev::recovered>) {
          // Only a record read back from disk: a live worker is not recovered.
          if (t.worker_phase() || t.in(job_state::paused)) return t.ignore();
          // Whatever it was doing died with the previous supervisor: it waits for a slot again.
          const bool changed = !t.in(job_state::queued) || e.shard_open;
          if (e.shard_open) t.emit(act::close_interrupted_shard{interrupted_by_exit});
          job.state = job_state::queued;
          if (changed) t.emit(act::persist{});
          t.emit(act::request_slot{});
        } else if constexpr (std::is_same_v<E, ev::unloadable>) {
          if (t.worker_phase()) return t.ignore();
          if (e.shard_open) t.emit(act::close_interrupted_shard{interrupted_by_exit});
          t.fail_job(e.diagnosis);
        } else if constexpr (std::is_same_v<E, ev::requeued_for_restart>) {
          if (t.worker_phase()) return t.ignore();  // the runner must be gone first
          if (t.in(job_state::queued) && !e.shard_open) return t.ignore();
          // Paused (or killed) only because the daemon is going away: the next daemon must pick
          // it up by itself.
          if (e.shard_open) t.emit(act::close_interrupted_shard{interrupted_by_force});
          job.state = job_state::queued;
          job.diagnosis.clear();
          t.emit(act::persist{});
        } else if constexpr (std::is_same_v<E, ev::checkpoint_found>) {
          if (t.worker_phase()) return t.ignore();
          if (e.replaces ? e.step == job.checkpoint_step : e.step <= job.checkpoint_step) {
            return t.ignore();
          }
          job.checkpoint_step = e.step;  // saved with the start that follows
        } else if constexpr (std::is_same_v<E, ev::start_requested>) {
          if (!t.in(job_state::queued) || t.worker_phase()) return t.ignore();
          t.emit(act::persist{});
          t.spawn();
        } else if constexpr (std::is_same_v<E, ev::resume_point>) {
          if (s.phase != worker_phase::starting || s.worker_alive) return t.ignore();
          job.checkpoint_step = e.step;  // saved by the spawn that follows
          s.shard_start_step = e.step;
          s.progress_step = e.step;
        } else if constexpr (std::is_same_v<E, ev::cancel_requested>) {
          if (s.phase == worker_phase::starting && !s.worker_alive) {
            s.target = stop_target::cancel;  // spawn under way: its outcome event finishes this
          } else if (t.worker_phase()) {
            // The protocol stop first, a kill only when stop_grace_ms runs out (DAEMON.md): a
            // stop already on its way (its grace timer running) just lands in cancelled.
            if (s.phase != worker_phase::stopping) {
              t.ask_stop(exit_cause::cancelled, stop_target::cancel);
            }
            s.target = stop_target::cancel;
          } else {
            if (t.delayed()) t.emit(act::cancel_timer{timer_kind::restart});
            t.cancel();
          }
        } else if constexpr (std::is_same_v<E, ev::pause_requested>) {
          return on_pause(t, e.reason.empty() ? "paused by request" : e.reason);
        } else if constexpr (std::is_same_v<E, ev::save_failed>) {
          // The store's own error names the file and the errno text (ENOSPC, EIO, ...): the user
          // needs it to tell a full disk from a dying one.
          return on_pause(t, e.reason.empty() ? "disk full" : "disk full: " + e.reason);
        } else if constexpr (std::is_same_v<E, ev::resume_requested>) {
          if (!t.in(job_state::paused) || t.worker_phase()) return t.ignore();
          job.state = job_state::queued;
          job.diagnosis.clear();
          s.target = stop_target::none;
          t.emit(act::persist{});
          t.emit(act::request_slot{});

          // ----- the current worker -----
        } else if constexpr (std::is_same_v<E, ev::worker_spawned>) {
          if (s.phase != worker_phase::starting || s.worker_alive) return t.ignore();
          s.worker_alive = true;
          s.last_spawn_ms = e.now_ms;
          s.hello_ms.reset();
          ++s.workers_started;
          if (s.target == stop_target::cancel) {  // cancelled while the spawn was under way
            t.emit(act::kill_group{});
            s.kill_sent = true;
            s.phase = worker_phase::stopping;
          } else if (s.target == stop_target::pause) {  // paused while the spawn was under way
            t.ask_stop(exit_cause::stopped, stop_target::pause);
          } else {
            // The budget runs from the hello: retire an earlier worker's timer now, or it would
            // stop this one during its start-up.
            if (s.time_budget_ms) t.emit(act::cancel_timer{timer_kind::budget});
            t.emit(act::start_timer{timer_kind::stall, cfg.worker.stall_timeout_ms});
          }
        } else if constexpr (std::is_same_v<E, ev::spawn_failed>) {
          if (s.phase != worker_phase::starting || s.worker_alive) return t.ignore();
          s.last_spawn_ms = e.now_ms;
          if (s.target == stop_target::cancel) {
            t.cancel();
          } else if (s.target == stop_target::pause) {
            t.pause(s.pause_reason);
          } else {
            t.fail("failed to start", "spawn failed: " + e.message, e.now_ms);
          }
        } else if constexpr (std::is_same_v<E, ev::hello>) {
          if (s.phase != worker_phase::starting || !s.worker_alive) return t.ignore();
          s.phase = worker_phase::running;
          s.hello_ms = e.now_ms;
          t.emit(act::start_timer{timer_kind::stall, cfg.worker.stall_timeout_ms});
          if (s.time_budget_ms) t.emit(act::start_timer{timer_kind::budget, *s.time_budget_ms});
        } else if constexpr (std::is_same_v<E, ev::progress>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          s.progress_step = e.step;
          if (s.phase != worker_phase::stopping) {
            t.emit(act::start_timer{timer_kind::stall, cfg.worker.stall_timeout_ms});
            if (s.phase == worker_phase::running && s.step_budget &&
                e.step - s.shard_start_step >= *s.step_budget) {
              t.ask_stop(exit_cause::memory_budget, stop_target::restart);
              s.stop_detail = "planned stop after " + std::to_string(*s.step_budget) +
                              " steps, learned from a hard-limit kill";
            }
            t.toward_shard_end(e);
          }
        } else if constexpr (std::is_same_v<E, ev::checkpoint_verified>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          if (e.step > job.checkpoint_step) {
            job.checkpoint_step = e.step;
            // Progress: the crash-loop count and the backoff start over.
            job.consecutive_failures = 0;
            s.hard_kills_without_progress = 0;
            s.backoff_attempt = 0;
          }
          if (s.phase != worker_phase::stopping) {
            t.emit(act::start_timer{timer_kind::stall, cfg.worker.stall_timeout_ms});
          }
          t.emit(act::persist{});
        } else if constexpr (std::is_same_v<E, ev::checkpoint_rejected>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          t.kill(exit_cause::crashed, "invalid checkpoint: " + e.reason, stop_target::restart);
        } else if constexpr (std::is_same_v<E, ev::protocol_violation>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          t.kill(exit_cause::crashed, "protocol violation: " + e.reason, stop_target::fail);
        } else if constexpr (std::is_same_v<E, ev::worker_error>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          s.worker_error = e.message;
          // A full disk is not the worker's fault: let it exit (it does after an `error`), then
          // rest paused until the user has made room and resumes.
          if (protocol::names_no_space(e.message) && s.target == stop_target::none &&
              s.phase != worker_phase::stopping) {
            s.pause_reason = "disk full: " + e.message;
            t.ask_stop(exit_cause::crashed, stop_target::pause);
            s.stop_detail = e.message;
          }
        } else if constexpr (std::is_same_v<E, ev::rss_sample>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          s.rss_bytes = e.bytes;  // kept even when it asks for nothing: see maybe_start_ahead
          const auto& m = cfg.memory;
          if (m.hard_limit_mib && e.bytes > static_cast<std::uint64_t>(*m.hard_limit_mib) * mib) {
            if (s.kill_sent) return t.ignore();
            t.kill(exit_cause::memory_hard, {}, stop_target::restart);
          } else if (m.soft_limit_mib &&
                     e.bytes > static_cast<std::uint64_t>(*m.soft_limit_mib) * mib) {
            if (s.phase == worker_phase::stopping) return t.ignore();  // already on its way out
            t.ask_stop(exit_cause::memory_soft, stop_target::restart);
          } else {
            return t.ignore();
          }
        } else if constexpr (std::is_same_v<E, ev::stall_timeout>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          if (s.phase == worker_phase::stopping) {
            if (s.kill_sent) return t.ignore();
            t.emit(act::kill_group{});  // hung while stopping: no point waiting for the grace
            s.kill_sent = true;
            t.emit(act::cancel_timer{timer_kind::grace});
          } else {
            t.kill(exit_cause::stalled,
                   "no message for " + std::to_string(cfg.worker.stall_timeout_ms) + " ms",
                   stop_target::restart);
          }
        } else if constexpr (std::is_same_v<E, ev::grace_elapsed>) {
          if (s.phase != worker_phase::stopping || s.kill_sent || !s.worker_alive) {
            return t.ignore();
          }
          t.emit(act::kill_group{});
          s.kill_sent = true;
        } else if constexpr (std::is_same_v<E, ev::worker_exited>) {
          if (!t.worker_phase() || !s.worker_alive) return t.ignore();
          on_exit(t, e);
        } else if constexpr (std::is_same_v<E, ev::budget_elapsed>) {
          // Armed at the hello and retired at the next spawn: only a running worker has one.
          if (s.phase != worker_phase::running) return t.ignore();
          if (!s.worker_alive || s.target != stop_target::none) return t.ignore();
          t.ask_stop(exit_cause::memory_budget, stop_target::restart);
          s.stop_detail = "planned stop after " + std::to_string(s.time_budget_ms.value_or(0)) +
                          " ms, learned from a hard-limit kill";
        } else if constexpr (std::is_same_v<E, ev::restart_due>) {
          if (!t.delayed()) return t.ignore();
          t.spawn();
        }
        return t.done();
      },
      event);
}

std::string_view phase_name(const job_standing& standing, const job_runtime& runtime) {
  if (standing.state == job_state::running && runtime.phase != worker_phase::none) {
    return to_string(runtime.phase);
  }
  return to_string(standing.state);
}

std::string_view to_string(worker_phase p) {
  switch (p) {
    case worker_phase::none:
      return "none";
    case worker_phase::starting:
      return "starting";
    case worker_phase::running:
      return "running";
    case worker_phase::stopping:
      return "stopping";
  }
  return "unknown";
}

std::string_view to_string(timer_kind k) {
  switch (k) {
    case timer_kind::stall:
      return "stall";
    case timer_kind::grace:
      return "grace";
    case timer_kind::restart:
      return "restart";
    case timer_kind::budget:
      return "budget";
  }
  return "unknown";
}

}  // namespace baton::supervisor
