// The SCM rules of os/service_model.h as plain data: control codes to daemon actions, the status
// a service reports through its life, and when a waiting caller calls a stop hung.
#include "os/service_model.h"

#include <catch2/catch.hpp>

using namespace baton::os;
using namespace std::chrono_literals;

TEST_CASE("SCM control codes map to the daemon's actions", "[unit][service]") {
  CHECK(action_for_control(scm::control_stop) == service_action::drain);
  CHECK(action_for_control(scm::control_shutdown) == service_action::drain);
  CHECK(action_for_control(scm::control_preshutdown) == service_action::drain);
  CHECK(action_for_control(scm::control_paramchange) == service_action::reload);
  CHECK(action_for_control(scm::control_interrogate) == service_action::report_status);
  CHECK(action_for_control(scm::control_pause) == service_action::not_implemented);
  CHECK(action_for_control(scm::control_continue) == service_action::not_implemented);
  CHECK(action_for_control(0x7) == service_action::not_implemented);  // NETBINDADD
  CHECK(action_for_control(128) == service_action::not_implemented);  // user-defined
}

TEST_CASE("a service starts pending, runs, then stops with an advancing checkpoint",
          "[unit][service]") {
  service_status_model m;
  const auto start = m.starting();
  CHECK(start.state == scm::state_start_pending);
  CHECK(start.controls_accepted == 0);  // no stop while recovering jobs
  CHECK(start.checkpoint == 1);
  CHECK(start.wait_hint_ms == 60000);

  const auto run = m.ready();
  CHECK(run.state == scm::state_running);
  CHECK(run.controls_accepted == (scm::accept_stop | scm::accept_shutdown |
                                  scm::accept_preshutdown | scm::accept_paramchange));
  CHECK(run.checkpoint == 0);
  CHECK(run.wait_hint_ms == 0);
  CHECK(m.ready() == run);  // a reload ends with ready() again: nothing changes

  const auto stop1 = m.stopping();
  CHECK(stop1.state == scm::state_stop_pending);
  CHECK(stop1.controls_accepted == 0);
  CHECK(stop1.checkpoint == 1);
  CHECK(stop1.wait_hint_ms == 30000);
  // The daemon's own stopping() after the host reported the request: the checkpoint advances.
  CHECK(m.stopping().checkpoint == 2);
  const auto ext = m.extend(45s);
  CHECK(ext.state == scm::state_stop_pending);
  CHECK(ext.checkpoint == 3);
  CHECK(ext.wait_hint_ms == 45000);
  CHECK(m.extend(20s).checkpoint == 4);

  // A reload that finishes during the stop must not bring the service back to RUNNING.
  CHECK(m.ready().state == scm::state_stop_pending);
  CHECK(m.current().checkpoint == 4);

  const auto done = m.stopped(0);
  CHECK(done.state == scm::state_stopped);
  CHECK(done.win32_exit_code == scm::no_error);
  CHECK(done.service_exit_code == 0);
  CHECK(done.checkpoint == 0);
  CHECK(done.wait_hint_ms == 0);
  // Nothing follows STOPPED.
  CHECK(m.ready() == done);
  CHECK(m.extend(5s) == done);
  CHECK(m.stopped(1) == done);
}

TEST_CASE("a failed service stops with a service-specific exit code", "[unit][service]") {
  service_status_model m;
  m.starting();
  const auto failed = m.stopped(2);  // e.g. an invalid settings file, before ever running
  CHECK(failed.state == scm::state_stopped);
  CHECK(failed.win32_exit_code == scm::error_service_specific);
  CHECK(failed.service_exit_code == 2);
}

TEST_CASE("extend() before stopping() starts the stop, and wait hints are clamped",
          "[unit][service]") {
  service_status_model m;
  m.ready();
  const auto r = m.extend(std::chrono::milliseconds(-5));
  CHECK(r.state == scm::state_stop_pending);
  CHECK(r.checkpoint == 1);
  CHECK(r.wait_hint_ms == 0);
  CHECK(m.extend(std::chrono::hours(24 * 365)).wait_hint_ms == 0xFFFFFFFFu);
}

TEST_CASE("a stop waiter calls a service hung only when its checkpoint stands still too long",
          "[unit][service]") {
  using clock = stop_wait::clock;
  const auto t0 = clock::time_point{} + 1h;
  service_status_report pending;
  pending.state = scm::state_stop_pending;
  pending.checkpoint = 1;
  pending.wait_hint_ms = 10000;

  stop_wait w;
  CHECK(w.observe(pending, t0) == stop_wait::verdict::waiting);
  CHECK(w.observe(pending, t0 + 10s + stop_wait::slack) == stop_wait::verdict::waiting);
  // Progress restarts the clock.
  pending.checkpoint = 2;
  CHECK(w.observe(pending, t0 + 14s) == stop_wait::verdict::waiting);
  CHECK(w.observe(pending, t0 + 28s) == stop_wait::verdict::waiting);
  CHECK(w.observe(pending, t0 + 30s) == stop_wait::verdict::hung);

  // A service that never leaves RUNNING after a stop request (wait hint 0) hangs after the slack.
  stop_wait w2;
  service_status_report running;
  running.state = scm::state_running;
  CHECK(w2.observe(running, t0) == stop_wait::verdict::waiting);
  CHECK(w2.observe(running, t0 + stop_wait::slack) == stop_wait::verdict::waiting);
  CHECK(w2.observe(running, t0 + stop_wait::slack + 1ms) == stop_wait::verdict::hung);

  service_status_report stopped;
  stopped.state = scm::state_stopped;
  CHECK(w2.observe(stopped, t0 + 1h) == stop_wait::verdict::stopped);
}
