// The job machine as a table: every state against every event, each row the next state (the
// machine's finer phase name) and the actions, written down by hand. A row that says `ignored`
// must leave the state exactly as it was. The settings are the ones of job_machine_test.cpp.
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "supervisor/job_machine.h"
#include "supervisor/job_machine_fixture.h"

using namespace baton::supervisor;
using baton::os::exit_status;
using baton::protocol::done_msg;

namespace {

using baton::supervisor::testing::describe;
using baton::supervisor::testing::mib;
using baton::supervisor::testing::settings;

struct machine {
  machine_settings cfg = settings();
  job_standing job;
  job_runtime rt;
  transition_result last;

  machine& on(const event& e) {
    last = transition(job, rt, e, cfg);
    job = last.standing;
    rt = last.runtime;
    return *this;
  }
};

// Each state reached by events from a new job (terminal and interrupted ones as read from disk).
const std::map<std::string, std::function<machine()>>& setups() {
  static const std::map<std::string, std::function<machine()>> all = {
      {"queued", [] { return machine{}; }},
      // Spawn asked for, its outcome not known yet.
      {"spawning", [] { return machine{}.on(ev::start_requested{}); }},
      {"starting", [] { return machine{}.on(ev::start_requested{}).on(ev::worker_spawned{1000}); }},
      {"running",
       [] {
         return machine{}
             .on(ev::start_requested{})
             .on(ev::worker_spawned{1000})
             .on(ev::hello{})
             .on(ev::checkpoint_verified{20});
       }},
      // Asked to stop at the soft limit, grace running.
      {"stopping",
       [] {
         return machine{}
             .on(ev::start_requested{})
             .on(ev::worker_spawned{1000})
             .on(ev::hello{})
             .on(ev::checkpoint_verified{20})
             .on(ev::rss_sample{1100 * mib});
       }},
      // A worker killed at the hard limit 500 ms after its spawn, before any checkpoint: no
      // progress, so the spawn floor holds, 500 ms to go before the next one.
      {"waiting",
       [] {
         return machine{}
             .on(ev::start_requested{})
             .on(ev::worker_spawned{1000})
             .on(ev::hello{})
             .on(ev::rss_sample{1600 * mib})
             .on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 1500});
       }},
      // One crash at step 20.
      {"backoff",
       [] {
         return machine{}
             .on(ev::start_requested{})
             .on(ev::worker_spawned{1000})
             .on(ev::hello{})
             .on(ev::checkpoint_verified{20})
             .on(ev::worker_exited{exit_status::exited(1), std::nullopt, 100000});
       }},
      {"paused", [] { return machine{}.on(ev::pause_requested{"p0"}); }},
      // A record a dead supervisor left running.
      {"interrupted",
       [] {
         machine m;
         m.job.state = job_state::running;
         return m;
       }},
      {"completed",
       [] {
         machine m;
         m.job.state = job_state::completed;
         return m;
       }},
      // As a crash loop leaves it; `baton resume` may try it again.
      {"failed",
       [] {
         machine m;
         m.job.state = job_state::failed;
         m.job.diagnosis = "crashed 5 times at step 0: exit code 1";
         m.job.consecutive_failures = 5;
         return m;
       }},
      {"cancelled",
       [] {
         machine m;
         m.job.state = job_state::cancelled;
         return m;
       }},
  };
  return all;
}

const std::map<std::string, event>& events() {
  static const std::map<std::string, event> all = {
      {"submitted", ev::submitted{}},
      {"recovered", ev::recovered{true}},
      {"unloadable", ev::unloadable{"bad record", false}},
      {"requeued", ev::requeued_for_restart{false}},
      {"checkpoint_found", ev::checkpoint_found{50}},
      {"start", ev::start_requested{}},
      {"resume_point", ev::resume_point{30}},
      {"cancel", ev::cancel_requested{}},
      {"pause", ev::pause_requested{"by user"}},
      {"resume", ev::resume_requested{true}},
      {"save_failed", ev::save_failed{"ENOSPC"}},
      {"spawned", ev::worker_spawned{5000}},
      {"spawn_failed", ev::spawn_failed{"not found", 5000}},
      {"hello", ev::hello{}},
      {"progress", ev::progress{30, {}, 0}},
      {"checkpoint", ev::checkpoint_verified{40}},
      {"rejected", ev::checkpoint_rejected{"digest"}},
      {"violation", ev::protocol_violation{"version 9"}},
      {"error", ev::worker_error{"bad data"}},
      {"rss_soft", ev::rss_sample{1100 * mib}},
      {"stall", ev::stall_timeout{}},
      {"exited", ev::worker_exited{exit_status::exited(1), std::nullopt, 200000}},
      {"restart_due", ev::restart_due{}},
      {"budget", ev::budget_elapsed{}},
      {"grace", ev::grace_elapsed{}},
  };
  return all;
}

// state | event | next state | actions, in order ("ignored": no change at all)
constexpr const char* table = R"(
queued | submitted | queued | request_slot
queued | recovered | queued | close_interrupted_shard{supervisor exited while the worker ran}; persist; request_slot
queued | unloadable | failed | log_event{job failed: bad record}; persist
queued | requeued | ignored
queued | checkpoint_found | queued |
queued | start | starting | persist; spawn_worker
queued | resume_point | ignored
queued | cancel | cancelled | log_event{job cancelled}; persist
queued | pause | paused | log_event{job paused: by user}; persist
queued | resume | ignored
queued | save_failed | paused | log_event{job paused: disk full: ENOSPC}; persist
queued | spawned | ignored
queued | spawn_failed | ignored
queued | hello | ignored
queued | progress | ignored
queued | checkpoint | ignored
queued | rejected | ignored
queued | violation | ignored
queued | error | ignored
queued | rss_soft | ignored
queued | stall | ignored
queued | exited | ignored
queued | restart_due | ignored
queued | budget | ignored
queued | grace | ignored

spawning | submitted | ignored
spawning | recovered | ignored
spawning | unloadable | ignored
spawning | requeued | ignored
spawning | checkpoint_found | ignored
spawning | start | ignored
spawning | resume_point | starting |
spawning | cancel | starting |
spawning | pause | starting |
spawning | resume | ignored
spawning | save_failed | starting |
spawning | spawned | starting | start_timer{stall,120000}
spawning | spawn_failed | backoff | start_timer{restart,1000}; persist
spawning | hello | ignored
spawning | progress | ignored
spawning | checkpoint | ignored
spawning | rejected | ignored
spawning | violation | ignored
spawning | error | ignored
spawning | rss_soft | ignored
spawning | stall | ignored
spawning | exited | ignored
spawning | restart_due | ignored
spawning | budget | ignored
spawning | grace | ignored

starting | submitted | ignored
starting | recovered | ignored
starting | unloadable | ignored
starting | requeued | ignored
starting | checkpoint_found | ignored
starting | start | ignored
starting | resume_point | ignored
starting | cancel | stopping | send_stop; start_timer{grace,30000}
starting | pause | stopping | send_stop; start_timer{grace,30000}
starting | resume | ignored
starting | save_failed | stopping | send_stop; start_timer{grace,30000}
starting | spawned | ignored
starting | spawn_failed | ignored
starting | hello | running | start_timer{stall,120000}
starting | progress | starting | start_timer{stall,120000}
starting | checkpoint | starting | start_timer{stall,120000}; persist
starting | rejected | stopping | kill_group; cancel_timer{grace}
starting | violation | stopping | kill_group; cancel_timer{grace}
starting | error | starting |
starting | rss_soft | stopping | send_stop; start_timer{grace,30000}
starting | stall | stopping | kill_group; cancel_timer{grace}
starting | exited | backoff | cancel_timer{stall}; cancel_timer{grace}; record_exit{crashed,exit code 1,exit code 1}; start_timer{restart,1000}; persist
starting | restart_due | ignored
starting | budget | ignored
starting | grace | ignored

running | submitted | ignored
running | recovered | ignored
running | unloadable | ignored
running | requeued | ignored
running | checkpoint_found | ignored
running | start | ignored
running | resume_point | ignored
running | cancel | stopping | send_stop; start_timer{grace,30000}
running | pause | stopping | send_stop; start_timer{grace,30000}
running | resume | ignored
running | save_failed | stopping | send_stop; start_timer{grace,30000}
running | spawned | ignored
running | spawn_failed | ignored
running | hello | ignored
running | progress | running | start_timer{stall,120000}
running | checkpoint | running | start_timer{stall,120000}; persist
running | rejected | stopping | kill_group; cancel_timer{grace}
running | violation | stopping | kill_group; cancel_timer{grace}
running | error | running |
running | rss_soft | stopping | send_stop; start_timer{grace,30000}
running | stall | stopping | kill_group; cancel_timer{grace}
running | exited | backoff | cancel_timer{stall}; cancel_timer{grace}; record_exit{crashed,exit code 1,exit code 1}; start_timer{restart,1000}; persist
running | restart_due | ignored
running | budget | stopping | send_stop; start_timer{grace,30000}
running | grace | ignored

stopping | submitted | ignored
stopping | recovered | ignored
stopping | unloadable | ignored
stopping | requeued | ignored
stopping | checkpoint_found | ignored
stopping | start | ignored
stopping | resume_point | ignored
stopping | cancel | stopping |
stopping | pause | stopping |
stopping | resume | ignored
stopping | save_failed | stopping |
stopping | spawned | ignored
stopping | spawn_failed | ignored
stopping | hello | ignored
stopping | progress | stopping |
stopping | checkpoint | stopping | persist
stopping | rejected | stopping | kill_group; cancel_timer{grace}
stopping | violation | stopping | kill_group; cancel_timer{grace}
stopping | error | stopping |
stopping | rss_soft | ignored
stopping | stall | stopping | kill_group; cancel_timer{grace}
stopping | exited | starting | cancel_timer{stall}; cancel_timer{grace}; record_exit{memory_soft,exit code 1,}; persist; spawn_worker
stopping | restart_due | ignored
stopping | budget | ignored
stopping | grace | stopping | kill_group

waiting | submitted | ignored
waiting | recovered | queued | close_interrupted_shard{supervisor exited while the worker ran}; persist; request_slot
waiting | unloadable | failed | log_event{job failed: bad record}; persist
waiting | requeued | queued | persist
waiting | checkpoint_found | waiting |
waiting | start | ignored
waiting | resume_point | ignored
waiting | cancel | cancelled | cancel_timer{restart}; log_event{job cancelled}; persist
waiting | pause | paused | cancel_timer{restart}; log_event{job paused: by user}; persist
waiting | resume | ignored
waiting | save_failed | paused | cancel_timer{restart}; log_event{job paused: disk full: ENOSPC}; persist
waiting | spawned | ignored
waiting | spawn_failed | ignored
waiting | hello | ignored
waiting | progress | ignored
waiting | checkpoint | ignored
waiting | rejected | ignored
waiting | violation | ignored
waiting | error | ignored
waiting | rss_soft | ignored
waiting | stall | ignored
waiting | exited | ignored
waiting | restart_due | starting | spawn_worker
waiting | budget | ignored
waiting | grace | ignored

backoff | submitted | ignored
backoff | recovered | queued | close_interrupted_shard{supervisor exited while the worker ran}; persist; request_slot
backoff | unloadable | failed | log_event{job failed: bad record}; persist
backoff | requeued | queued | persist
backoff | checkpoint_found | backoff |
backoff | start | ignored
backoff | resume_point | ignored
backoff | cancel | cancelled | cancel_timer{restart}; log_event{job cancelled}; persist
backoff | pause | paused | cancel_timer{restart}; log_event{job paused: by user}; persist
backoff | resume | ignored
backoff | save_failed | paused | cancel_timer{restart}; log_event{job paused: disk full: ENOSPC}; persist
backoff | spawned | ignored
backoff | spawn_failed | ignored
backoff | hello | ignored
backoff | progress | ignored
backoff | checkpoint | ignored
backoff | rejected | ignored
backoff | violation | ignored
backoff | error | ignored
backoff | rss_soft | ignored
backoff | stall | ignored
backoff | exited | ignored
backoff | restart_due | starting | spawn_worker
backoff | budget | ignored
backoff | grace | ignored

paused | submitted | ignored
paused | recovered | ignored
paused | unloadable | failed | log_event{job failed: bad record}; persist
paused | requeued | queued | persist
paused | checkpoint_found | paused |
paused | start | ignored
paused | resume_point | ignored
paused | cancel | cancelled | log_event{job cancelled}; persist
paused | pause | ignored
paused | resume | queued | persist; request_slot
paused | save_failed | ignored
paused | spawned | ignored
paused | spawn_failed | ignored
paused | hello | ignored
paused | progress | ignored
paused | checkpoint | ignored
paused | rejected | ignored
paused | violation | ignored
paused | error | ignored
paused | rss_soft | ignored
paused | stall | ignored
paused | exited | ignored
paused | restart_due | ignored
paused | budget | ignored
paused | grace | ignored

interrupted | submitted | ignored
interrupted | recovered | queued | close_interrupted_shard{supervisor exited while the worker ran}; persist; request_slot
interrupted | unloadable | failed | log_event{job failed: bad record}; persist
interrupted | requeued | queued | persist
interrupted | checkpoint_found | running |
interrupted | start | ignored
interrupted | resume_point | ignored
interrupted | cancel | cancelled | log_event{job cancelled}; persist
interrupted | pause | paused | log_event{job paused: by user}; persist
interrupted | resume | ignored
interrupted | save_failed | paused | log_event{job paused: disk full: ENOSPC}; persist
interrupted | spawned | ignored
interrupted | spawn_failed | ignored
interrupted | hello | ignored
interrupted | progress | ignored
interrupted | checkpoint | ignored
interrupted | rejected | ignored
interrupted | violation | ignored
interrupted | error | ignored
interrupted | rss_soft | ignored
interrupted | stall | ignored
interrupted | exited | ignored
interrupted | restart_due | ignored
interrupted | budget | ignored
interrupted | grace | ignored

failed | submitted | ignored
failed | recovered | ignored
failed | unloadable | ignored
failed | requeued | ignored
failed | checkpoint_found | ignored
failed | start | ignored
failed | resume_point | ignored
failed | cancel | ignored
failed | pause | ignored
failed | resume | queued | log_event{job resumed at step 0 (it had failed: crashed 5 times at step 0: exit code 1)}; persist; request_slot
failed | save_failed | ignored
failed | spawned | ignored
failed | spawn_failed | ignored
failed | hello | ignored
failed | progress | ignored
failed | checkpoint | ignored
failed | rejected | ignored
failed | violation | ignored
failed | error | ignored
failed | rss_soft | ignored
failed | stall | ignored
failed | exited | ignored
failed | restart_due | ignored
failed | budget | ignored
failed | grace | ignored
)";

struct row {
  std::string state, event, next;
  std::vector<std::string> actions;
  bool ignored = false;
};

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(' ');
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(' ');
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto at = s.find(sep, start);
    out.push_back(trim(s.substr(start, at == std::string::npos ? at : at - start)));
    if (at == std::string::npos) break;
    start = at + sep.size();
  }
  return out;
}

std::vector<row> rows() {
  std::vector<row> out;
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    const auto cols = split(line, "|");
    row r;
    r.state = cols.at(0);
    r.event = cols.at(1);
    if (cols.at(2) == "ignored") {
      r.ignored = true;
    } else {
      r.next = cols.at(2);
      if (!cols.at(3).empty()) r.actions = split(cols.at(3), ";");
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

TEST_CASE("the table covers every state and every event exactly once", "[unit][job_machine]") {
  std::map<std::pair<std::string, std::string>, int> seen;
  for (const auto& r : rows()) {
    INFO(r.state << " | " << r.event);
    CHECK(setups().count(r.state) == 1);
    CHECK(events().count(r.event) == 1);
    ++seen[{r.state, r.event}];
  }
  // Completed and cancelled are checked below, against every event, without rows of their own;
  // failed has rows (a resume takes it back).
  CHECK(seen.size() == (setups().size() - 2) * events().size());
  for (const auto& [key, n] : seen) CHECK(n == 1);
  CHECK(std::variant_size_v<event> == events().size());
}

TEST_CASE("every state x every event: the next state and the actions", "[unit][job_machine]") {
  for (const auto& r : rows()) {
    INFO(r.state << " | " << r.event);
    auto m = setups().at(r.state)();
    const auto standing = m.job;
    const auto runtime = m.rt;
    const auto before = std::string(phase_name(m.job, m.rt));
    m.on(events().at(r.event));
    std::vector<std::string> got;
    for (const auto& a : m.last.actions) got.push_back(describe(a));
    CHECK(m.last.ignored == r.ignored);
    if (r.ignored) {
      CHECK(got.empty());
      CHECK(m.job == standing);
      CHECK(m.rt == runtime);
      CHECK(std::string(phase_name(m.job, m.rt)) == before);
    } else {
      CHECK(std::string(phase_name(m.job, m.rt)) == r.next);
      CHECK(got == r.actions);
    }
  }
}

TEST_CASE("completed and cancelled ignore every event but a cancelled job's resume",
          "[unit][job_machine]") {
  for (const char* state : {"completed", "cancelled"}) {
    for (const auto& [name, e] : events()) {
      INFO(state << " | " << name);
      if (std::string(state) == "cancelled" && name == "resume") continue;  // job_machine_test
      auto m = setups().at(state)();
      const auto standing = m.job;
      m.on(e);
      CHECK(m.last.ignored);
      CHECK(m.last.actions.empty());
      CHECK(m.job == standing);
    }
  }
}

TEST_CASE("cancel asks the worker to stop and kills it only after stop_grace_ms",
          "[unit][job_machine]") {
  // DAEMON.md promises the protocol stop first; the worker once got SIGKILL at once.
  auto m = setups().at("running")();
  const auto actions = [&] {
    std::vector<std::string> got;
    for (const auto& a : m.last.actions) got.push_back(describe(a));
    return got;
  };
  m.on(ev::cancel_requested{});
  CHECK(actions() == std::vector<std::string>{"send_stop", "start_timer{grace,30000}"});
  m.on(ev::progress{21, {}, 0});  // still stepping while it saves: no kill yet
  CHECK(actions().empty());
  m.on(ev::grace_elapsed{});
  CHECK(actions() == std::vector<std::string>{"kill_group"});
  m.on(ev::worker_exited{exit_status::signaled(9), std::nullopt, 40000});
  CHECK(m.job.state == job_state::cancelled);
  CHECK(actions() == std::vector<std::string>{"cancel_timer{stall}", "cancel_timer{grace}",
                                              "record_exit{cancelled,signal 9,}",
                                              "log_event{job cancelled}", "persist"});

  // A worker that stops within the grace is never killed.
  m = setups().at("running")();
  m.on(ev::cancel_requested{});
  m.on(ev::worker_exited{exit_status::exited(3), done_msg{21, false}, 2000});
  CHECK(m.job.state == job_state::cancelled);
  for (const auto& a : actions()) CHECK(a != "kill_group");

  // A cancel during a stop already on its way (a soft-limit recycle) keeps that stop's grace
  // timer and ends cancelled, not restarted.
  m = setups().at("stopping")();
  m.on(ev::cancel_requested{});
  CHECK(actions().empty());
  m.on(ev::worker_exited{exit_status::exited(3), done_msg{20, false}, 2000});
  CHECK(m.job.state == job_state::cancelled);
}
