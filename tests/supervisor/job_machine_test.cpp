#include "supervisor/job_machine.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>

#include "supervisor/job_machine_fixture.h"

using namespace baton::supervisor;
using baton::os::exit_status;
using baton::protocol::done_msg;

namespace {

using baton::supervisor::testing::describe;
using baton::supervisor::testing::mib;
using baton::supervisor::testing::settings;

std::vector<std::string> describe(const std::vector<action>& as) {
  std::vector<std::string> out;
  for (const auto& a : as) out.push_back(describe(a));
  return out;
}

// Drives the machine through events, keeping the state; `last` is the last transition.
struct driver {
  machine_settings cfg = settings();
  job_standing job;
  job_runtime s;
  transition_result last;

  std::vector<std::string> on(const event& e) {
    last = transition(job, s, e, cfg);
    job = last.standing;
    s = last.runtime;
    return describe(last.actions);
  }

  std::string phase() const { return std::string(phase_name(job, s)); }

  // queued -> running with a worker spawned at `now`.
  void run_worker(std::int64_t now) {
    if (phase() == "queued") on(ev::start_requested{});
    if (phase() == "backoff" || phase() == "waiting") on(ev::restart_due{});
    REQUIRE(phase() == "starting");
    on(ev::worker_spawned{now});
    on(ev::hello{now});
    REQUIRE(phase() == "running");
  }
};

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("start, hello, progress and checkpoints", "[unit][job_machine]") {
  driver d;
  CHECK(d.on(ev::start_requested{}) == strings{"persist", "spawn_worker"});
  CHECK(d.phase() == "starting");
  CHECK(d.on(ev::worker_spawned{1000}) == strings{"start_timer{stall,120000}"});
  CHECK(d.s.worker_alive);
  CHECK(d.on(ev::hello{}) == strings{"start_timer{stall,120000}"});
  CHECK(d.phase() == "running");
  CHECK(d.on(ev::progress{10, {}, 0}) == strings{"start_timer{stall,120000}"});
  CHECK(d.s.progress_step == 10);
  CHECK(d.on(ev::checkpoint_verified{100}) == strings{"start_timer{stall,120000}", "persist"});
  CHECK(d.job.checkpoint_step == 100);
  // Under the limits a sample asks for nothing; the machine keeps it (see starting ahead).
  CHECK(d.on(ev::rss_sample{500 * mib}).empty());
  CHECK(d.last.ignored);
  CHECK(d.s.rss_bytes == 500 * mib);
}

TEST_CASE("shard done: next worker at once, however short the shard", "[unit][job_machine]") {
  driver d;
  d.run_worker(1000);
  d.on(ev::checkpoint_verified{100});
  auto a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{100, false}, 5000});
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{completed,exit code 0,}", "persist", "spawn_worker"});
  CHECK(d.phase() == "starting");
  CHECK(d.job.consecutive_failures == 0);

  d.on(ev::worker_spawned{6000});
  d.on(ev::hello{});
  d.on(ev::checkpoint_verified{200});
  // 400 ms after its spawn: the floor is for respawn loops, and a worker that checkpointed is
  // not one, so the next starts at once.
  a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{200, false}, 6400});
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{completed,exit code 0,}", "persist", "spawn_worker"});
  CHECK(d.phase() == "starting");

  // A soft-limit recycle with a new checkpoint, 300 ms after its spawn: at once too.
  d.on(ev::worker_spawned{7000});
  d.on(ev::hello{});
  CHECK(d.on(ev::rss_sample{1001 * mib})[0] == "send_stop");
  d.on(ev::checkpoint_verified{250});
  a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{250, false}, 7300});
  CHECK(a.back() == "spawn_worker");
  CHECK(d.phase() == "starting");
}

// An exit that says the job has `total` steps.
ev::worker_exited exit_of(exit_status st, std::optional<done_msg> done, std::int64_t now,
                          std::int64_t total) {
  ev::worker_exited e{st, std::move(done), now};
  e.total_steps = total;
  return e;
}

TEST_CASE("job complete", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{500});
  auto a = d.on(exit_of(exit_status::exited(0), done_msg{500, true}, 9000, 500));
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{completed,exit code 0,}", "log_event{job completed}", "persist"});
  CHECK(d.phase() == "completed");
  CHECK(is_terminal(d.job.state));
}

TEST_CASE("soft limit: stop, grace, then kill, and a recycle is not a failure",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{300});
  CHECK(d.on(ev::rss_sample{1001 * mib}) == strings{"send_stop", "start_timer{grace,30000}"});
  CHECK(d.phase() == "stopping");
  CHECK(d.on(ev::rss_sample{1200 * mib}).empty());  // no second stop
  CHECK(d.last.ignored);

  SECTION("the worker checkpoints and exits in time") {
    d.on(ev::checkpoint_verified{350});
    auto a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{350, false}, 60000});
    CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                       "record_exit{memory_soft,exit code 0,}", "persist", "spawn_worker"});
  }
  SECTION("the grace runs out") {
    CHECK(d.on(ev::grace_elapsed{}) == strings{"kill_group"});
    CHECK(d.on(ev::grace_elapsed{}).empty());
    auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 60000});
    CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                       "record_exit{memory_soft,signal 9,}", "persist", "spawn_worker"});
  }
  SECTION("the hard limit is crossed while stopping") {
    CHECK(d.on(ev::rss_sample{1600 * mib}) == strings{"kill_group", "cancel_timer{grace}"});
    auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 60000});
    CHECK(a[2] == "record_exit{memory_hard,signal 9,}");
  }
  CHECK(d.job.consecutive_failures == 0);
  CHECK(d.phase() == "starting");
}

TEST_CASE("hard limit: kill at once, recycle", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  CHECK(d.on(ev::rss_sample{1501 * mib}) == strings{"kill_group", "cancel_timer{grace}"});
  CHECK(d.phase() == "stopping");
  CHECK(d.on(ev::rss_sample{1700 * mib}).empty());
  auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 500});
  // Killed before any checkpoint, 500 ms after its spawn: no progress, so the spawn floor holds
  // (a planned gap, shown as waiting, not a backoff after a failure).
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{memory_hard,signal 9,}", "start_timer{restart,500}", "persist"});
  CHECK(d.phase() == "waiting");
  CHECK(d.on(ev::restart_due{}) == strings{"spawn_worker"});
  CHECK(d.job.consecutive_failures == 0);
  CHECK(d.s.backoff_attempt == 0);
}

TEST_CASE("memory limits at exactly the limit do not trigger", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  CHECK(d.on(ev::rss_sample{1000 * mib}).empty());
  d.cfg.memory.soft_limit_mib.reset();
  d.cfg.memory.hard_limit_mib.reset();
  CHECK(d.on(ev::rss_sample{100000 * mib}).empty());
  CHECK(d.phase() == "running");
}

TEST_CASE("a crash loop at one step fails with an exact diagnosis", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{3140});
  std::int64_t now = 0;
  const std::vector<std::int64_t> delays = {1000, 2000, 4000, 8000};
  for (int i = 0; i < 4; ++i) {
    now += 100000;
    auto a = d.on(ev::worker_exited{exit_status::signaled(6), std::nullopt, now});
    CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                       "record_exit{crashed,signal 6,signal 6}",
                       "start_timer{restart," + std::to_string(delays[i]) + "}", "persist"});
    CHECK(d.job.consecutive_failures == i + 1);
    CHECK(d.phase() == "backoff");
    d.run_worker(now);
  }
  auto a = d.on(ev::worker_exited{exit_status::signaled(6), std::nullopt, now + 5});
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{crashed,signal 6,signal 6}",
                     "log_event{job failed: crashed 5 times at step 3140: signal 6}", "persist"});
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis == "crashed 5 times at step 3140: signal 6");
}

TEST_CASE("a crash never restarts sooner than 1 s, whatever the backoff says",
          "[unit][job_machine]") {
  driver d;
  d.cfg.restart.backoff_initial_ms = 10;
  d.run_worker(5000);
  auto a = d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 5200});
  CHECK(a[3] == "start_timer{restart,1000}");
}

TEST_CASE("progress of the checkpoint resets the failure count and backoff",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 100000});
  d.run_worker(200000);
  d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 300000});
  CHECK(d.job.consecutive_failures == 2);
  CHECK(d.s.backoff_attempt == 2);
  d.run_worker(400000);
  d.on(ev::checkpoint_verified{50});
  CHECK(d.job.consecutive_failures == 0);
  CHECK(d.s.backoff_attempt == 0);
  auto a = d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 500000});
  CHECK(a[3] == "start_timer{restart,1000}");  // backoff starts over
  CHECK(d.job.consecutive_failures == 1);
  CHECK(d.s.failure_step == 50);
}

TEST_CASE("a failure at a new checkpoint starts the count over", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  for (int i = 0; i < 4; ++i) {
    d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, (i + 1) * 100000});
    d.run_worker((i + 1) * 100000);
  }
  CHECK(d.job.consecutive_failures == 4);
  // The worker advanced a checkpoint and crashed again: count restarts from 1.
  d.on(ev::checkpoint_verified{10});
  d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 900000});
  CHECK(d.job.consecutive_failures == 1);
  CHECK(d.phase() == "backoff");
}

TEST_CASE("memory recycles between crashes do not count as failures", "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 2;
  d.run_worker(0);
  d.on(ev::worker_exited{exit_status::signaled(11), std::nullopt, 10000});
  CHECK(d.job.consecutive_failures == 1);
  // One hard kill (work lost, not a crash), then soft recycles that checkpoint and stop.
  d.run_worker(20000);
  d.on(ev::progress{1, {}, 0});
  d.on(ev::rss_sample{2000 * mib});
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 25000});
  CHECK(d.job.consecutive_failures == 1);
  CHECK(d.phase() == "starting");
  for (int i = 1; i < 5; ++i) {
    d.run_worker(20000 + i * 10000);
    d.on(ev::progress{i, {}, 0});
    d.on(ev::rss_sample{1200 * mib});
    d.on(ev::checkpoint_verified{i});
    d.on(ev::worker_exited{exit_status::exited(3), done_msg{i, false}, 25000 + i * 10000});
    CHECK(d.job.consecutive_failures == 0);
    CHECK(d.phase() == "starting");
  }
  d.on(ev::worker_spawned{100000});
  d.on(ev::worker_exited{exit_status::signaled(11), std::nullopt, 200000});
  d.on(ev::restart_due{});
  d.on(ev::worker_spawned{300000});
  d.on(ev::worker_exited{exit_status::signaled(11), std::nullopt, 400000});
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis == "crashed 2 times at step 4: signal 11");
}

TEST_CASE("a soft recycle without a new checkpoint counts as a failure (no recycle loop)",
          "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 2;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{50});
  d.on(ev::worker_exited{exit_status::exited(0), done_msg{50, false}, 1000});
  for (int i = 0; i < 2; ++i) {
    d.run_worker(10000 + i * 10000);
    d.on(ev::rss_sample{1200 * mib});  // over the soft limit before any checkpoint
    d.on(ev::worker_exited{exit_status::exited(3), done_msg{50, false}, 15000 + i * 10000});
  }
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis ==
        "stopped without a new checkpoint 2 times at step 50: memory_soft, no new checkpoint "
        "since step 50");
}

TEST_CASE("a done that claims the job complete without a verified last checkpoint fails it",
          "[unit][job_machine]") {
  SECTION("no checkpoint at all") {
    driver d;
    d.run_worker(0);
    auto a = d.on(exit_of(exit_status::exited(0), done_msg{60, true}, 5000, 60));
    CHECK(a[2] ==
          "record_exit{crashed,exit code 0,the worker said the job is complete at step 60, but "
          "the newest verified checkpoint is at step 0 of 60 (it reported no checkpoint that "
          "verified)}");
    CHECK(d.phase() == "failed");
    CHECK_THAT(d.job.diagnosis, Catch::StartsWith("the worker said the job is complete"));
  }
  SECTION("a checkpoint short of the last step") {
    driver d;
    d.run_worker(0);
    d.on(ev::checkpoint_verified{20});
    d.on(exit_of(exit_status::exited(0), done_msg{60, true}, 5000, 60));
    CHECK(d.phase() == "failed");
    CHECK(d.job.diagnosis ==
          "the worker said the job is complete at step 60, but the newest verified checkpoint "
          "is at step 20 of 60");
  }
  SECTION("an unknown total") {
    driver d;
    d.run_worker(0);
    d.on(ev::checkpoint_verified{20});
    d.on(exit_of(exit_status::exited(0), done_msg{20, true}, 5000, 0));
    CHECK(d.phase() == "failed");
  }
  SECTION("the checkpoint went away with the worker") {
    driver d;
    d.run_worker(0);
    d.on(ev::checkpoint_verified{60});
    auto e = exit_of(exit_status::exited(0), done_msg{60, true}, 5000, 60);
    e.checkpoint_now = 40;  // the runner found ckpt-60 gone; ckpt-40 is the newest that verifies
    d.on(e);
    CHECK(d.phase() == "failed");
    CHECK(d.job.checkpoint_step == 40);
  }
}

TEST_CASE("a shard that ends without a new checkpoint counts as a failure (no respawn loop)",
          "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 3;
  for (int i = 0; i < 3; ++i) {
    d.run_worker(i * 100000);
    auto a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{0, false}, i * 100000 + 10});
    CHECK(a[2] ==
          "record_exit{crashed,exit code 0,done at step 0 (exit code 0) with no checkpoint past "
          "step 0}");
  }
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis ==
        "ended its shard without a new checkpoint 3 times at step 0: done at step 0 (exit code "
        "0) with no checkpoint past step 0");
}

TEST_CASE("exit code 2 fails the job at once, in the worker's own words", "[unit][job_machine]") {
  SECTION("its error line") {
    driver d;
    d.run_worker(0);
    CHECK(d.on(ev::worker_error{"bad data: column 3 is text"}).empty());
    CHECK_FALSE(d.last.ignored);
    auto a = d.on(ev::worker_exited{exit_status::exited(2), std::nullopt, 5000});
    CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                       "record_exit{crashed,exit code 2,exit code 2: bad data: column 3 is text}",
                       "log_event{job failed: exit code 2: bad data: column 3 is text}",
                       "persist"});
    CHECK(d.phase() == "failed");
  }
  SECTION("its stderr when it sent no error") {
    driver d;
    d.run_worker(0);
    ev::worker_exited e{exit_status::exited(2), std::nullopt, 5000};
    e.stderr_tail = "usage: train.py --data FILE";
    d.on(e);
    CHECK(d.job.diagnosis == "exit code 2: usage: train.py --data FILE");
  }
  SECTION("other crashes name the worker's words too, and are retried") {
    driver d;
    d.run_worker(0);
    d.on(ev::worker_error{"CUDA out of memory"});
    d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 5000});
    CHECK(d.phase() == "backoff");
    CHECK(d.job.consecutive_failures == 1);
  }
}

TEST_CASE("a protocol violation fails the job at once", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{20});
  CHECK(d.on(ev::protocol_violation{"checkpoint.step: expected an integer, got string"}) ==
        strings{"kill_group", "cancel_timer{grace}"});
  d.on(ev::pause_requested{"by user"});  // a pause does not soften it
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 5000});
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis == "protocol violation: checkpoint.step: expected an integer, got string");
}

TEST_CASE("a worker's full disk pauses the job, and resume takes it back", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{12});
  CHECK(d.on(ev::worker_error{"cannot write the checkpoint: [Errno 28] No space left on device"}) ==
        strings{"send_stop", "start_timer{grace,30000}"});
  d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 5000});
  CHECK(d.phase() == "paused");
  CHECK(d.job.diagnosis ==
        "disk full: cannot write the checkpoint: [Errno 28] No space left on device");
  CHECK(d.job.consecutive_failures == 0);
  CHECK(d.on(ev::resume_requested{}) == strings{"persist", "request_slot"});
  CHECK(d.phase() == "queued");
  CHECK(d.job.checkpoint_step == 12);

  SECTION("a stderr that says so when the worker sent no error") {
    driver e;
    e.run_worker(0);
    ev::worker_exited x{exit_status::exited(1), std::nullopt, 5000};
    x.stderr_tail = "OSError: [Errno 122] Disk quota exceeded";
    e.on(x);
    CHECK(e.phase() == "paused");
  }
}

TEST_CASE("a failed job resumes only when asked with failed_too", "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 1;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{30});
  d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 5000});
  REQUIRE(d.phase() == "failed");
  CHECK(d.on(ev::resume_requested{}).empty());  // `baton run` does not revive it
  CHECK(d.last.ignored);
  CHECK(d.on(ev::resume_requested{true}) ==
        strings{"log_event{job resumed at step 30 (it had failed: crashed 1 times at step 30: exit "
                "code 1)}",
                "persist", "request_slot"});
  CHECK(d.phase() == "queued");
  CHECK(d.job.diagnosis.empty());
  CHECK(d.job.consecutive_failures == 0);
  CHECK(d.job.checkpoint_step == 30);
}

TEST_CASE("a cancelled job resumes when asked, a completed one never", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{30});
  d.on(ev::cancel_requested{});
  d.on(ev::worker_exited{exit_status::signaled(15), std::nullopt, 5000});
  REQUIRE(d.phase() == "cancelled");
  CHECK(d.on(ev::resume_requested{}).empty());
  CHECK(d.on(ev::resume_requested{true}) ==
        strings{"log_event{job resumed at step 30 (it had been cancelled)}", "persist",
                "request_slot"});
  CHECK(d.phase() == "queued");
  CHECK(d.job.checkpoint_step == 30);

  driver done;
  done.job.state = job_state::completed;
  CHECK(done.on(ev::resume_requested{true}).empty());
  CHECK(done.last.ignored);
}

TEST_CASE("a checkpoint found to replace a gone one may lower the step", "[unit][job_machine]") {
  driver d;
  d.job.checkpoint_step = 50;
  CHECK(d.on(ev::checkpoint_found{20}).empty());
  CHECK(d.last.ignored);  // lower and not replacing: the record stays
  d.on(ev::checkpoint_found{20, true});
  CHECK_FALSE(d.last.ignored);
  CHECK(d.job.checkpoint_step == 20);
}

TEST_CASE("a stall kills the worker and counts as a failure", "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 1;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{7});
  CHECK(d.on(ev::stall_timeout{}) == strings{"kill_group", "cancel_timer{grace}"});
  auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 500000});
  CHECK(a[2] == "record_exit{stalled,signal 9,no message for 120000 ms}");
  CHECK(d.job.diagnosis == "stalled 1 times at step 7: no message for 120000 ms");
  CHECK(d.phase() == "failed");
}

TEST_CASE("an invalid checkpoint kills the worker as a crash", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  CHECK(d.on(ev::checkpoint_rejected{"digest mismatch"}) ==
        strings{"kill_group", "cancel_timer{grace}"});
  auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 500000});
  CHECK(a[2] == "record_exit{crashed,signal 9,invalid checkpoint: digest mismatch}");
  CHECK(d.job.consecutive_failures == 1);
}

TEST_CASE("exit 0 without done is a crash and spawn failures count", "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 2;
  d.run_worker(0);
  auto a = d.on(ev::worker_exited{exit_status::exited(0), std::nullopt, 500000});
  CHECK(a[2] == "record_exit{crashed,exit code 0,exit code 0 without a done message}");
  d.on(ev::restart_due{});
  a = d.on(ev::spawn_failed{"not found", 600000});
  CHECK(a ==
        strings{"log_event{job failed: failed to start 2 times at step 0: spawn failed: not found}",
                "persist"});
  CHECK(d.phase() == "failed");
}

TEST_CASE("cancel in every state", "[unit][job_machine]") {
  const strings cancel_now = {"log_event{job cancelled}", "persist"};
  SECTION("queued") {
    driver d;
    CHECK(d.on(ev::cancel_requested{}) == cancel_now);
    CHECK(d.phase() == "cancelled");
  }
  SECTION("starting, spawn under way") {
    driver d;
    d.on(ev::start_requested{});
    CHECK(d.on(ev::cancel_requested{}).empty());
    CHECK(d.on(ev::worker_spawned{0}) == strings{"kill_group"});
    CHECK(d.phase() == "stopping");
    auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 10});
    CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                       "record_exit{cancelled,signal 9,}", "log_event{job cancelled}", "persist"});
  }
  SECTION("starting, spawn then fails") {
    driver d;
    d.on(ev::start_requested{});
    d.on(ev::cancel_requested{});
    CHECK(d.on(ev::spawn_failed{"x", 0}) == cancel_now);
    CHECK(d.phase() == "cancelled");
  }
  SECTION("running") {
    driver d;
    d.run_worker(0);
    // The protocol stop first; the kill waits for stop_grace_ms (DAEMON.md).
    CHECK(d.on(ev::cancel_requested{}) == strings{"send_stop", "start_timer{grace,30000}"});
    CHECK(d.on(ev::grace_elapsed{}) == strings{"kill_group"});
    auto a = d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 10});
    CHECK(a[2] == "record_exit{cancelled,signal 9,}");
    CHECK(d.phase() == "cancelled");
  }
  SECTION("stopping after a soft limit") {
    driver d;
    d.run_worker(0);
    d.on(ev::rss_sample{1100 * mib});
    CHECK(d.on(ev::cancel_requested{}).empty());  // the stop and its grace timer are on their way
    d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 10});
    CHECK(d.phase() == "cancelled");
  }
  SECTION("backoff") {
    driver d;
    d.run_worker(0);
    d.on(ev::worker_exited{exit_status::exited(1), std::nullopt, 10});
    REQUIRE(d.phase() == "backoff");
    CHECK(d.on(ev::cancel_requested{}) ==
          strings{"cancel_timer{restart}", "log_event{job cancelled}", "persist"});
    CHECK(d.phase() == "cancelled");
    CHECK(d.on(ev::restart_due{}).empty());  // a late timer does nothing
  }
  SECTION("paused") {
    driver d;
    d.on(ev::pause_requested{});
    REQUIRE(d.phase() == "paused");
    CHECK(d.on(ev::cancel_requested{}) == cancel_now);
  }
  SECTION("terminal states stay put") {
    for (auto terminal : {job_state::completed, job_state::failed, job_state::cancelled}) {
      driver d;
      d.job.state = terminal;
      CHECK(d.on(ev::cancel_requested{}).empty());
      CHECK(d.last.ignored);
      CHECK(d.job.state == terminal);
    }
  }
}

TEST_CASE("pause and disk full stop the worker gracefully and park the job",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  CHECK(d.on(ev::save_failed{}) == strings{"send_stop", "start_timer{grace,30000}"});
  auto a = d.on(ev::worker_exited{exit_status::exited(0), done_msg{40, false}, 100});
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{stopped,exit code 0,}", "log_event{job paused: disk full}",
                     "persist"});
  CHECK(d.phase() == "paused");
  CHECK(d.job.diagnosis == "disk full");
  CHECK(d.on(ev::resume_requested{}) == strings{"persist", "request_slot"});
  CHECK(d.job.diagnosis.empty());
  CHECK(d.phase() == "queued");
  CHECK(d.on(ev::start_requested{}) == strings{"persist", "spawn_worker"});
}

TEST_CASE("a pause during a soft-limit stop lands in paused", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::rss_sample{1100 * mib});
  CHECK(d.on(ev::pause_requested{}).empty());
  d.on(ev::worker_exited{exit_status::exited(0), done_msg{40, false}, 100});
  CHECK(d.phase() == "paused");
}

TEST_CASE("events that mean nothing in a state are ignored", "[unit][job_machine]") {
  driver d;
  for (const event& e : std::vector<event>{ev::hello{}, ev::progress{1, {}, 0}, ev::stall_timeout{},
                                           ev::grace_elapsed{}, ev::restart_due{},
                                           ev::rss_sample{1 << 30}, ev::resume_requested{}}) {
    CHECK(d.on(e).empty());
    CHECK(d.last.ignored);
    CHECK(d.phase() == "queued");
  }
}

TEST_CASE("settings come from the job spec", "[unit][job_machine]") {
  baton::protocol::job_spec spec;
  spec.memory.soft_limit_mib = 64;
  spec.restart.max_failures = 9;
  spec.worker.stop_grace_ms = 5;
  const auto m = machine_settings::from(spec);
  CHECK(m.memory.soft_limit_mib == 64);
  CHECK(m.restart.max_failures == 9);
  CHECK(m.worker.stop_grace_ms == 5);
  CHECK(m.min_restart_interval_ms == 1000);
}

TEST_CASE("a hard kill teaches the next workers to stop before the limit", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{100});
  d.on(ev::worker_exited{exit_status::exited(0), baton::protocol::done_msg{100, false}, 2000});
  d.run_worker(3000);  // resumes at 100; RSS grows from the start of each process
  for (std::int64_t step = 101; step <= 180; ++step) d.on(ev::progress{step, {}, 0});
  d.on(ev::rss_sample{1600 * mib});
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 5000});
  REQUIRE(d.s.step_budget == 60);  // 3/4 of the 80 steps the killed worker got through
  d.run_worker(7000);              // the kill lost steps 101-180: resume at 100 again
  CHECK(d.s.shard_start_step == 100);
  for (std::int64_t step = 101; step < 160; ++step)
    CHECK(d.on(ev::progress{step, {}, 0}) == strings{"start_timer{stall,120000}"});
  CHECK(d.on(ev::progress{160, {}, 0}) ==
        strings{"start_timer{stall,120000}", "send_stop", "start_timer{grace,30000}"});
  CHECK(d.phase() == "stopping");
  d.on(ev::checkpoint_verified{160});
  auto a =
      d.on(ev::worker_exited{exit_status::exited(3), baton::protocol::done_msg{160, false}, 9000});
  CHECK(a[2] ==
        "record_exit{memory_budget,exit code 3,planned stop after 60 steps, learned from a "
        "hard-limit kill}");
  CHECK(d.job.consecutive_failures == 0);
}

TEST_CASE("hard kills without a new checkpoint fail the job after max_failures",
          "[unit][job_machine]") {
  driver d;
  d.cfg.restart.max_failures = 3;
  for (int i = 0; i < 3; ++i) {
    d.run_worker(i * 10000);
    d.on(ev::rss_sample{1600 * mib});
    d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, i * 10000 + 500});
  }
  CHECK(d.phase() == "failed");
  CHECK(d.job.diagnosis ==
        "killed at the hard memory limit 3 times at step 0 without a new checkpoint: raise "
        "memory.hard_limit_mib");
  CHECK(d.job.consecutive_failures == 0);  // never counted as crashes
}

TEST_CASE("a worker stopped from outside (exit 3 after done) is restarted, not a crash",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{40});
  auto a =
      d.on(ev::worker_exited{exit_status::exited(3), baton::protocol::done_msg{40, false}, 5000});
  CHECK(a == strings{"cancel_timer{stall}", "cancel_timer{grace}",
                     "record_exit{stopped,exit code 3,stopped by a signal from outside}", "persist",
                     "spawn_worker"});
  CHECK(d.job.consecutive_failures == 0);
  // Exit 3 without the done message is a crash like any other.
  d.on(ev::worker_spawned{7000});
  d.on(ev::hello{});
  d.on(ev::worker_exited{exit_status::exited(3), std::nullopt, 9000});
  CHECK(d.job.consecutive_failures == 1);
}

TEST_CASE("a worker stopped from outside before a new checkpoint is stopped, and backs off",
          "[unit][job_machine]") {
  // A service manager's SIGTERM reaches a worker that is still restoring before the daemon's own
  // pause does: it exits 3 after `done` at the step it resumed from.
  driver d;
  d.cfg.restart.max_failures = 2;
  d.run_worker(0);
  auto a =
      d.on(ev::worker_exited{exit_status::exited(3), baton::protocol::done_msg{0, false}, 500});
  CHECK(std::find(a.begin(), a.end(),
                  "record_exit{stopped,exit code 3,stopped by a signal from outside at step 0, no "
                  "checkpoint past step 0}") != a.end());
  CHECK(d.job.consecutive_failures == 1);
  CHECK(d.phase() == "backoff");
  // The daemon's pause then lands on a job waiting out its backoff.
  d.on(ev::pause_requested{"the baton daemon is shutting down"});
  CHECK(d.phase() == "paused");
}

TEST_CASE("a hard kill also teaches a time budget, for workers that report rarely",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::rss_sample{1600 * mib});
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 8000});
  REQUIRE(d.s.time_budget_ms == 6000);  // 3/4 of the 8 s the killed worker ran after its hello
  CHECK_FALSE(d.s.step_budget);         // it never said how far it got
  d.on(ev::restart_due{});
  // The budget runs from the hello: start-up is not training time.
  CHECK(d.on(ev::worker_spawned{10000}) ==
        strings{"cancel_timer{budget}", "start_timer{stall,120000}"});
  // A timer left from an earlier worker cannot stop this one before its hello.
  CHECK(d.on(ev::budget_elapsed{}).empty());
  CHECK(d.on(ev::hello{14000}) == strings{"start_timer{stall,120000}", "start_timer{budget,6000}"});
  CHECK(d.on(ev::budget_elapsed{}) == strings{"send_stop", "start_timer{grace,30000}"});
  d.on(ev::checkpoint_verified{50});
  auto a =
      d.on(ev::worker_exited{exit_status::exited(3), baton::protocol::done_msg{50, false}, 16500});
  CHECK(a[2] ==
        "record_exit{memory_budget,exit code 3,planned stop after 6000 ms, learned from a "
        "hard-limit kill}");
  CHECK(d.s.hard_kills_without_progress == 0);
  // A budget timer that fires while no worker runs means nothing.
  CHECK(d.on(ev::budget_elapsed{}).empty());
}

TEST_CASE("a slow start-up does not eat the time budget a hard kill teaches",
          "[unit][job_machine]") {
  // A budget counted from the spawn stopped a worker that started slowly (a loaded machine,
  // `import torch`) before its first step, again and again, until the job failed.
  driver d;
  if (d.phase() == "queued") d.on(ev::start_requested{});
  REQUIRE(d.phase() == "starting");
  d.on(ev::worker_spawned{1000});
  d.on(ev::hello{7000});  // six seconds of start-up
  REQUIRE(d.phase() == "running");
  d.on(ev::rss_sample{1600 * mib});
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 9000});
  CHECK(d.s.time_budget_ms == 1500);  // 3/4 of the 2 s from hello to kill, not of 8 s
  // Killed before its hello: nothing to learn about training time.
  d.on(ev::restart_due{});
  REQUIRE(d.phase() == "starting");
  d.on(ev::worker_spawned{20000});
  d.on(ev::rss_sample{1600 * mib});
  d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 21000});
  CHECK(d.s.time_budget_ms == 1500);
}

TEST_CASE("a damaged newer checkpoint makes the next worker resume lower", "[unit][job_machine]") {
  driver d;
  d.run_worker(0);
  d.on(ev::checkpoint_verified{100});
  d.on(ev::worker_exited{exit_status::exited(0), done_msg{100, false}, 5000});
  REQUIRE(d.phase() == "starting");
  // The runner verified the store again before the spawn: ckpt 100 no longer verifies.
  CHECK(d.on(ev::resume_point{60}).empty());
  CHECK_FALSE(d.last.ignored);
  CHECK(d.job.checkpoint_step == 60);
  CHECK(d.s.shard_start_step == 60);
  d.on(ev::worker_spawned{6000});
  // Once the worker runs, its start is fixed.
  CHECK(d.on(ev::resume_point{10}).empty());
  CHECK(d.last.ignored);
}

TEST_CASE("the next worker starts ahead at a shard's end and takes over", "[unit][job_machine]") {
  driver d;
  d.cfg.start_ahead = true;
  d.run_worker(1000);
  d.on(ev::rss_sample{400 * mib});
  // Not yet at the shard's end: nothing.
  CHECK(d.on(ev::progress{50, {}, 0}) == strings{"start_timer{stall,120000}"});
  CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}", "start_ahead"});
  CHECK(d.s.ahead);
  // Once per worker: a second report of the end asks for nothing more.
  CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}"});
  d.on(ev::checkpoint_verified{100});
  // The shard's clean end spawns at once: the runner uses the worker started ahead.
  CHECK(d.on(ev::worker_exited{exit_status::exited(0), done_msg{100, false}, 5000}) ==
        strings{"cancel_timer{stall}", "cancel_timer{grace}", "record_exit{completed,exit code 0,}",
                "persist", "spawn_worker"});
  CHECK_FALSE(d.s.ahead);
  CHECK_FALSE(d.s.rss_bytes);  // the new worker's memory is not known yet
}

TEST_CASE("near the shard's end the worker's reports are read unpaced, at the end it starts ahead",
          "[unit][job_machine]") {
  driver d;
  d.cfg.start_ahead = true;
  d.cfg.shard_end_watch_ms = 300;
  d.run_worker(1000);
  d.on(ev::rss_sample{400 * mib});
  const auto report = [&](std::int64_t step, std::int64_t now_ms) {
    return d.on(ev::progress{step, 1000, now_ms});
  };
  const strings stall{"start_timer{stall,120000}"};
  const strings unpaced{"start_timer{stall,120000}", "read_unpaced"};
  const strings ahead{"start_timer{stall,120000}", "start_ahead"};
  SECTION("one step a millisecond: unpaced 300 steps before the end") {
    CHECK(report(0, 10000) == stall);  // the first report: no pace yet
    CHECK(report(500, 10500) == stall);
    CHECK(report(699, 10699) == stall);  // 301 ms to go
    CHECK(report(700, 10700) == unpaced);
    CHECK(d.s.unpaced);
    CHECK(report(800, 10800) == stall);  // once per worker
    CHECK(report(1000, 11000) == ahead);
  }
  SECTION("reports read in one batch give no pace") {
    CHECK(report(0, 10000) == stall);
    // 900 steps in 100 ms would leave 11 ms, but 100 ms of reports is mostly read batching.
    CHECK(report(900, 10100) == stall);
    CHECK(report(950, 10250) == unpaced);  // 50 steps at 950 per 250 ms
  }
  SECTION("a pace of its own for every worker") {
    CHECK(report(0, 10000) == stall);
    CHECK(report(100, 20000) == stall);  // slow: 100 steps in 10 s
    d.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 21000});
    d.run_worker(30000);
    d.on(ev::rss_sample{400 * mib});
    CHECK_FALSE(d.s.pace_step);
    CHECK_FALSE(d.s.unpaced);
    CHECK(report(100, 31000) == stall);
    CHECK(report(900, 31250) == unpaced);  // fast now: 100 steps left take 31 ms
  }
  SECTION("the last shard has no end to start ahead for") {
    CHECK(d.on(ev::progress{0, std::nullopt, 10000}) == stall);
    CHECK(d.on(ev::progress{900, std::nullopt, 10900}) == stall);
    CHECK(d.on(ev::progress{1000, std::nullopt, 11000}) == stall);
  }
  SECTION("nor a job that does not start ahead") {
    d.cfg.start_ahead = false;
    CHECK(report(0, 10000) == stall);
    CHECK(report(900, 10900) == stall);
    CHECK(report(1000, 11000) == stall);
  }
}

TEST_CASE("a worker started ahead is dropped when no spawn follows", "[unit][job_machine]") {
  const auto ahead_at_shard_end = [] {
    driver d;
    d.cfg.start_ahead = true;
    d.run_worker(1000);
    d.on(ev::rss_sample{400 * mib});
    d.on(ev::progress{100, 100, 0});
    REQUIRE(d.s.ahead);
    return d;
  };
  SECTION("the worker crashes: backoff") {
    auto d = ahead_at_shard_end();
    const auto a = d.on(ev::worker_exited{exit_status::signaled(11), std::nullopt, 5000});
    CHECK(d.phase() == "backoff");
    CHECK(std::count(a.begin(), a.end(), "drop_ahead") == 1);
    CHECK_FALSE(d.s.ahead);
  }
  SECTION("a cancel") {
    auto d = ahead_at_shard_end();
    d.on(ev::cancel_requested{});
    const auto a = d.on(ev::worker_exited{exit_status::exited(3), done_msg{100, false}, 5000});
    CHECK(d.phase() == "cancelled");
    CHECK(std::count(a.begin(), a.end(), "drop_ahead") == 1);
  }
  SECTION("the job's end") {
    auto d = ahead_at_shard_end();
    d.on(ev::checkpoint_verified{100});
    ev::worker_exited last{exit_status::exited(0), done_msg{100, true}, 5000};
    last.total_steps = 100;
    const auto a = d.on(last);
    CHECK(d.phase() == "completed");
    CHECK(std::count(a.begin(), a.end(), "drop_ahead") == 1);
  }
}

TEST_CASE("no start ahead where two workers would not fit or nothing follows",
          "[unit][job_machine]") {
  driver d;
  d.run_worker(1000);
  d.on(ev::rss_sample{100 * mib});
  // Off (a worker.command that does not say it can, or worker.preload).
  CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}"});
  d.cfg.start_ahead = true;
  SECTION("twice the worker's memory is over the soft limit (1000 MiB)") {
    d.on(ev::rss_sample{501 * mib});
    CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}"});
    d.on(ev::rss_sample{500 * mib});
    CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}", "start_ahead"});
  }
  SECTION("a limit, and no sample yet") {
    driver fresh;
    fresh.cfg.start_ahead = true;
    fresh.run_worker(1000);
    CHECK(fresh.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}"});
  }
  SECTION("no limit at all: always") {
    d.cfg.memory.soft_limit_mib.reset();
    d.cfg.memory.hard_limit_mib.reset();
    d.on(ev::rss_sample{4000 * mib});
    CHECK(d.on(ev::progress{100, 100, 0}) == strings{"start_timer{stall,120000}", "start_ahead"});
  }
  SECTION("the worker is being stopped") {
    d.on(ev::pause_requested{"by user"});
    const auto a = d.on(ev::progress{100, 100, 0});
    CHECK(std::count(a.begin(), a.end(), "start_ahead") == 0);
  }
  SECTION("the learned step budget goes with it") {
    d.s.step_budget = 40;
    d.s.shard_start_step = 70;
    const auto a = d.on(ev::progress{100, 100, 0});
    CHECK(std::count(a.begin(), a.end(), "start_ahead{40}") == 1);
  }
}
