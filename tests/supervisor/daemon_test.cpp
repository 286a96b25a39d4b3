// The daemon's decisions (FIFO slots, cancel, pause and resume, shutdown and forced stop,
// recovery after a restart, reload, crash loops) on a os::mem_env state directory with fake workers
// (support/fake_launcher.h): no process is started and no job file touches the disk. Only the
// control socket is real (the server is part of start()). The same cases with real Python
// workers are in tests/integration/daemon_python_worker_test.cpp.
#include "supervisor/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "os/mem_env.h"
#include "os/system.h"
#include "protocol/job_spec.h"
#include "supervisor/job_store.h"
#include "support/fake_launcher.h"
#include "support/mem_state_locker.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const fs::path base = "/mem";
const fs::path state_dir = "/mem/state";

// 512 samples in batches of 64: 8 steps per epoch; one shard per `shard_epochs`.
json job_doc(const std::string& name, int epochs, int shard_epochs = 1) {
  return {{"name", name},
          {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
          {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
          {"training",
           {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
            {"batch_size", 64},
            {"epochs", epochs}}},
          {"shard", {{"epochs", shard_epochs}}},
          {"memory", {{"poll_ms", 10}}},
          {"worker", {{"command", {"fake-trainer"}}}}};
}

struct fixture {
  explicit fixture(const std::string& name, int max_workers = 1)
      : dir(baton::test::fresh_scratch_dir("baton-daemon-test-" + name)) {
    REQUIRE(files.create_dirs(base));
    trainer.files = &files;
    launcher.script = trainer.script();
    options.settings.state_dir = state_dir;
    options.settings.socket = dir / "s.sock";
    options.settings.max_workers = max_workers;
    options.handle_signals = false;
    options.become_subreaper = false;
    options.launcher = &launcher;
    options.locker = &locker;
    options.hooks.log = [this](log_level, const std::string& m) { log += m + "\n"; };
    options.hooks.on_stopped = [this](int code) {
      stopped_code = code;
      io.stop();
    };
  }

  // How the workers started from now on behave: `hang_after` steps into a shard they stop
  // stepping, and only a stop or a kill ends them (0: they run their shard out).
  void train(std::int64_t hang_after) {
    trainer.hang_after = hang_after;
    launcher.script = trainer.script();
  }

  void start() {
    d = std::make_unique<baton::supervisor::daemon>(io, files, options);
    REQUIRE(d->start());
  }

  api_response call(const api_call& c) { return d->handle(c); }

  json status(const std::string& id) {
    auto r = call(status_call{id});
    REQUIRE(r.status == 200);
    return r.body;
  }

  std::string submit(const json& doc) {
    auto r = call(submit_call{doc, base.string(), 0});
    INFO(r.body.dump());
    REQUIRE(r.status == 201);
    return r.body.at("id").get<std::string>();
  }

  // Runs the io_context until `done` holds (checked every 5 ms) or the deadline passes.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    asio::steady_timer t(io);
    bool ok = false;
    std::function<void()> check = [&] {
      if (done()) {
        ok = true;
        io.stop();
        return;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        io.stop();
        return;
      }
      t.expires_after(5ms);
      t.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) check();
      });
    };
    // restart() first: a condition already true stops the loop in check(), and a restart after
    // that would undo the stop and run on forever.
    io.restart();
    check();
    io.run();
    io.restart();
    return ok;
  }

  std::string state(const std::string& id) { return status(id).at("state").get<std::string>(); }

  job_store store() { return job_store(files, state_dir); }

  // A job record written straight into the state directory, as an earlier daemon left it.
  std::string make(const std::string& name, job_state st, std::int64_t created, int epochs = 1,
                   bool open_shard = false) {
    auto s = store();
    REQUIRE(s.open());
    auto spec = baton::protocol::parse_job_spec(job_doc(name, epochs).dump(), base);
    REQUIRE(spec);
    auto r = s.create(*spec, 8 * epochs);
    REQUIRE(r);
    r->state = st;
    r->created_ms = created;
    if (st == job_state::paused) r->diagnosis = "paused: disk full: No space left on device";
    if (open_shard) {
      shard_record sh;
      sh.pid = 999999;
      sh.started_ms = created;
      r->shards.push_back(sh);
    }
    REQUIRE(s.save(*r));
    return r->id;
  }

  fs::path dir;
  baton::os::mem_env files;
  baton::test::fake_launcher launcher;
  baton::test::fake_trainer trainer;
  baton::test::mem_state_locker locker;
  asio::io_context io;
  daemon_options options;
  std::unique_ptr<baton::supervisor::daemon> d;
  std::string log;
  std::optional<int> stopped_code;
};

}  // namespace

TEST_CASE("submit validates the spec and answers every error line", "[unit][daemon]") {
  fixture f("submit");
  f.start();
  auto doc = job_doc("bad", 1);
  doc["training"]["batch_size"] = -3;
  doc["shard"] = {{"epochs", 1}, {"stepz", 2}};
  auto r = f.call(submit_call{doc, base.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("training.batch_size"));
  REQUIRE(r.body.at("errors").size() >= 2);

  auto missing = job_doc("csv", 1);
  missing["data"] = {{"type", "csv"}, {"path", "nope.csv"}};
  r = f.call(submit_call{missing, base.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(),
             Catch::Contains("data.path: file not found: " + (base / "nope.csv").string()));

  // Without a built-in worker, a job must bring its own command.
  auto builtin = job_doc("builtin", 1);
  builtin.erase("worker");
  r = f.call(submit_call{builtin, base.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("worker.command: required"));

  CHECK(f.submit(job_doc("ok", 1)) == "ok-1");
  CHECK(f.submit(job_doc("ok", 1)) == "ok-2");
  auto list = f.call(list_call{});
  REQUIRE(list.status == 200);
  REQUIRE(list.body.at("jobs").size() == 2);
  CHECK(list.body["jobs"][0]["id"] == "ok-1");
  CHECK(list.body.at("schema_version") == 1);
  CHECK(f.call(status_call{"nope"}).status == 404);
  CHECK(f.call(logs_call{"nope", 0}).status == 404);
  CHECK(f.call(cancel_call{"nope"}).status == 404);
  auto health = f.call(health_call{});
  CHECK(health.body.at("status") == "ok");
  CHECK(health.body.at("running") == 1);
  CHECK(health.body.at("queued") == 1);
  CHECK(f.launcher.workers.size() == 1);  // one slot: only ok-1 has a worker
}

TEST_CASE("a user reaches only their own jobs: others' are 403 by name, list and prune skip them",
          "[unit][daemon]") {
  fixture f("owners", 2);
  f.start();
  const api_caller alice{1001, false}, bob{1002, false};
  const auto submit_as = [&](const api_caller& who, std::uint32_t gid, const std::string& name) {
    auto r = f.d->handle(submit_call{job_doc(name, 1), base.string(), who.uid, gid, {27}}, who);
    INFO(r.body.dump());
    REQUIRE(r.status == 201);
    return r.body.at("id").get<std::string>();
  };
  const auto a = submit_as(alice, 100, "a");
  const auto b = submit_as(bob, 200, "b");
  const auto owner = f.call(status_call{a}).body.at("owner");
  CHECK(owner == json({{"uid", 1001}, {"gid", 100}, {"groups", {27}}}));

  const std::string denied = "job " + a + " belongs to uid 1001; you are uid 1002";
  for (const api_call& c :
       {api_call(status_call{a}), api_call(logs_call{a, 0}), api_call(cancel_call{a}),
        api_call(resume_call{a}), api_call(history_call{a, 0}), api_call(remove_call{a, true})}) {
    auto r = f.d->handle(c, bob);
    INFO(call_name(c));
    CHECK(r.status == 403);
    CHECK(r.body.value("error", "") == denied);
  }
  CHECK(f.d->handle(status_call{a}, alice).status == 200);
  CHECK(f.d->handle(status_call{"nope"}, bob).status == 404);

  const auto ids = [](const api_response& r) {
    std::vector<std::string> out;
    for (const auto& j : r.body.at("jobs")) out.push_back(j.at("id").get<std::string>());
    return out;
  };
  CHECK(ids(f.d->handle(list_call{}, alice)) == std::vector<std::string>{a});
  CHECK(ids(f.d->handle(list_call{}, bob)) == std::vector<std::string>{b});
  CHECK(ids(f.d->handle(list_call{}, api_caller{0, true})) == std::vector<std::string>{a, b});

  // At rest, runners gone: prune leaves a job alone while its runner is still winding down.
  REQUIRE(f.run_until([&] {
    return f.state(a) == "completed" && f.state(b) == "completed" && f.d->running_count() == 0;
  }));
  prune_call everything;
  auto pruned = f.d->handle(everything, bob);
  REQUIRE(pruned.status == 200);
  CHECK(pruned.body.at("removed") == json::array({b}));
  CHECK(f.call(status_call{a}).status == 200);  // alice's job is still there

  // The dashboard's URL holds a token that reads every job.
  auto dash = f.d->handle(dashboard_call{}, bob);
  CHECK(dash.status == 403);
  CHECK_THAT(dash.body.value("error", ""), Catch::Contains("you are uid 1002"));
}

TEST_CASE("a daemon not running as root refuses jobs_run_as = submitter at start",
          "[unit][daemon]") {
  fixture f("submitter-not-root");
  f.options.settings.run_as = jobs_run_as::submitter;
  baton::supervisor::daemon d(f.io, f.files, f.options);
  const auto s = d.start();
  REQUIRE_FALSE(s);
  // As root the uid check passes, and the in-memory env (no disk to guard) is what is refused.
  if (::geteuid() == 0) {
    CHECK_THAT(s.error().message, Catch::Contains("jobs_run_as = \"submitter\": the job folders"));
  } else {
    CHECK_THAT(s.error().message,
               Catch::Contains("jobs_run_as = \"submitter\" needs the daemon to run as root"));
  }
}

TEST_CASE("jobs run FIFO within max_workers and complete", "[unit][daemon]") {
  fixture f("fifo", 1);
  f.start();
  const auto a = f.submit(job_doc("a", 2));
  const auto b = f.submit(job_doc("b", 1));
  CHECK(f.d->running_count() == 1);
  CHECK(f.d->queued_ids() == std::vector<std::string>{b});
  CHECK(f.state(a) == "running");
  auto sb = f.status(b);
  CHECK(sb.at("state") == "queued");
  CHECK(sb.at("queue_position") == 1);
  CHECK(sb.at("live").is_null());

  REQUIRE(f.run_until([&] { return f.state(a) == "completed" && f.state(b) == "completed"; }));
  const auto ra = f.status(a);
  const auto rb = f.status(b);
  CHECK(ra.at("checkpoint_step") == 16);
  CHECK(ra.at("shards").size() == 2);  // one shard per epoch
  // a's second shard started as its first ended: the slot stayed a's (b's worker came after),
  // and a worker that checkpointed is followed at once, with no 1 s spawn floor between.
  CHECK(ra["shards"][1]["started_ms"].get<std::int64_t>() -
            ra["shards"][0]["ended_ms"].get<std::int64_t>() <
        500);
  CHECK(ra.at("exits_by_cause") == json{{"completed", 2}});
  CHECK(rb["shards"][0]["started_ms"].get<std::int64_t>() >=
        ra["shards"].back()["ended_ms"].get<std::int64_t>());
  CHECK(ra.at("peak_rss_bytes").get<std::int64_t>() > 0);
  REQUIRE(f.launcher.workers.size() == 3);
  // b's worker resumed nothing; a's second one resumed at a's first checkpoint.
  CHECK(f.launcher.workers[1]->env("BATON_START_STEP") == "8");
  CHECK(f.launcher.workers[2]->env("BATON_JOB_ID") == b);

  // The log pages through the supervisor's events, written through the env.
  auto logs = f.call(logs_call{a, 0});
  REQUIRE(logs.status == 200);
  CHECK_THAT(logs.body.at("data").get<std::string>(), Catch::Contains("[baton] job completed"));
  CHECK(logs.body.at("state") == "completed");
  CHECK(logs.body.at("next_offset") == logs.body.at("size"));

  CHECK(f.call(cancel_call{a}).status == 409);  // already completed
}

TEST_CASE("history and metrics: a job's run is in its history file and in /metrics",
          "[unit][daemon]") {
  fixture f("history", 1);
  f.start();
  const auto a = f.submit(job_doc("a", 2));
  // While it runs: the history is the runner's, in memory, and /metrics shows the worker. (No
  // progress is in yet, so the wait's first check is false: run_until must enter the io loop.)
  REQUIRE(f.call(history_call{a, 0}).body.at("progress").empty());
  REQUIRE(f.run_until([&] {
    auto h = f.call(history_call{a, 0});
    return h.status == 200 && !h.body.at("rss").empty() && !h.body.at("progress").empty();
  }));
  auto m = f.call(metrics_call{});
  CHECK(m.status == 200);
  CHECK(m.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK_THAT(m.text, Catch::Contains("baton_job_state{job_id=\"" + a + "\",state=\"running\"} 1"));
  CHECK_THAT(m.text,
             Catch::Contains("baton_job_worker_resident_memory_bytes{job_id=\"" + a + "\"}"));

  // At rest: read back from the job folder through the env. "completed" comes a moment before
  // the runner is let go (the worker may not be reaped yet), and until then the history is still
  // the runner's; `live` is null only once the job is at rest.
  REQUIRE(f.run_until([&] {
    const auto s = f.status(a);
    return s.at("state") == "completed" && s.at("live").is_null();
  }));
  auto h = f.call(history_call{a, 0});
  REQUIRE(h.status == 200);
  std::vector<std::string> kinds;
  for (const auto& e : h.body.at("events")) kinds.push_back(e.at("kind").get<std::string>());
  CHECK(std::count(kinds.begin(), kinds.end(), "spawn") == 2);
  CHECK(std::count(kinds.begin(), kinds.end(), "completed") == 2);
  CHECK(std::count(kinds.begin(), kinds.end(), "checkpoint") >= 2);
  CHECK(h.body.at("progress").back().at("step") == 16);
  const auto next = h.body.at("next").get<std::int64_t>();
  CHECK(next > 0);
  auto later = f.call(history_call{a, next});
  REQUIRE(later.status == 200);
  CHECK(later.body.at("rss").empty());
  CHECK(later.body.at("events").empty());
  // The file of a job at rest is read once while it keeps its size (the same-size overwrite
  // below is answered from what was read), and again once it changed.
  const auto file = job_history::file_in(f.store().job_dir(a));
  const auto text = f.files.files().at(file.generic_string());
  REQUIRE(f.files.put(file, std::string(text.size() - 1, ' ') + "\n"));
  CHECK(f.call(history_call{a, 0}).body == h.body);
  const std::string cancel_line = R"({"type":"event","seq":)" + std::to_string(next + 1) +
                                  R"(,"t_ms":1,"kind":"cancel","pid":0,"shard":1,"step":16})";
  REQUIRE(f.files.put(file, text + cancel_line + "\n"));
  auto reread = f.call(history_call{a, next});
  REQUIRE(reread.body.at("events").size() == 1);
  CHECK(reread.body.at("events")[0].at("kind") == "cancel");
  CHECK(f.call(history_call{"nope", 0}).status == 404);
  m = f.call(metrics_call{});
  CHECK_THAT(m.text,
             Catch::Contains("baton_job_state{job_id=\"" + a + "\",state=\"completed\"} 1"));
  CHECK_THAT(m.text,
             Catch::Contains("baton_job_restarts_total{job_id=\"" + a + "\",cause=\"recycle\"} 0"));
}

TEST_CASE("cancel: a queued job never starts, a running one stops", "[unit][daemon]") {
  fixture f("cancel", 1);
  f.start();
  f.train(5);
  const auto a = f.submit(job_doc("a", 200, 200));
  const auto b = f.submit(job_doc("b", 1));
  auto r = f.call(cancel_call{b});
  CHECK(r.status == 202);
  CHECK(r.body.at("state") == "cancelled");
  CHECK(f.d->queued_ids().empty());
  CHECK(f.call(cancel_call{b}).status == 409);
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() > 0; }));
  r = f.call(cancel_call{a});
  CHECK(r.status == 202);
  // Cancelled, and the runner handed back (its rest is posted after the state changes).
  REQUIRE(f.run_until([&] { return f.state(a) == "cancelled" && f.d->running_count() == 0; }));
  CHECK(f.d->running_count() == 0);
  CHECK(f.status(b).at("shards").empty());
  REQUIRE(f.launcher.workers.size() == 1);
  // The protocol stop first (DAEMON.md); a worker that obeys it is never killed.
  CHECK(f.launcher.workers[0]->stop_received());
  CHECK_FALSE(f.launcher.workers[0]->killed());
  CHECK(f.status(a).at("shards")[0].at("cause") == "cancelled");
  // The queued job's cancel is in its log like a running one's.
  auto logs = f.call(logs_call{b, 0});
  CHECK_THAT(logs.body.at("data").get<std::string>(), Catch::Contains("[baton] job cancelled"));
}

TEST_CASE("cancel kills a worker that ignores the stop, but only after stop_grace_ms",
          "[unit][daemon]") {
  fixture f("cancel-grace", 1);
  f.start();
  f.train(5);
  // The trainer, deaf: it never reads the stop.
  f.launcher.script = [inner = f.trainer.script()](baton::test::fake_process& p) {
    inner(p);
    p.on_stdin = nullptr;
  };
  json doc = job_doc("deaf", 200, 200);
  doc["worker"]["stop_grace_ms"] = 300;
  const auto id = f.submit(doc);
  REQUIRE(f.run_until([&] { return f.status(id).at("step").get<int>() > 0; }));
  const auto asked = std::chrono::steady_clock::now();
  REQUIRE(f.call(cancel_call{id}).status == 202);
  REQUIRE(f.run_until([&] { return f.state(id) == "cancelled"; }));
  const auto waited = std::chrono::steady_clock::now() - asked;
  REQUIRE(f.launcher.workers.size() == 1);
  CHECK(f.launcher.workers[0]->stop_received());
  CHECK(f.launcher.workers[0]->killed());
  CHECK(waited >= 290ms);
  CHECK(f.status(id).at("shards")[0].at("cause") == "cancelled");
}

TEST_CASE("shutdown checkpoints running jobs and leaves them queued on disk", "[unit][daemon]") {
  fixture f("shutdown", 2);
  f.start();
  f.train(10);  // steps to 10, then only a stop ends it
  const auto a = f.submit(job_doc("a", 400, 400));
  const auto b = f.submit(job_doc("b", 1));
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() >= 10; }));
  f.d->shutdown();
  CHECK(f.d->stopping());
  CHECK(f.call(submit_call{job_doc("late", 1), base.string(), 0}).status == 503);
  f.io.restart();
  f.io.run_for(5s);
  REQUIRE(f.stopped_code == 0);
  f.d.reset();
  CHECK(f.launcher.workers[0]->stop_received());

  auto store = f.store();
  auto rec = store.load(a);
  REQUIRE(rec);
  CHECK(rec->record.state == job_state::queued);
  CHECK(rec->record.diagnosis.empty());
  CHECK(rec->record.checkpoint_step == 10);
  REQUIRE_FALSE(rec->record.shards.empty());
  CHECK(rec->record.shards.back().cause == exit_cause::stopped);
  auto done = store.load(b);
  REQUIRE(done);
  CHECK(done->record.state != job_state::paused);  // never left paused by a shutdown
}

TEST_CASE("a forced stop kills the workers and leaves their jobs queued, shard closed",
          "[unit][daemon]") {
  fixture f("shutdown-now", 1);
  f.start();
  f.train(4);
  const auto a = f.submit(job_doc("a", 400, 400));
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() >= 4; }));
  f.d->shutdown_now();
  CHECK(f.stopped_code == 1);
  CHECK(f.d->running_count() == 0);
  CHECK(f.launcher.workers[0]->killed());
  auto rec = f.store().load(a);
  REQUIRE(rec);
  CHECK(rec->record.state == job_state::queued);
  REQUIRE(rec->record.shards.size() == 1);
  CHECK(rec->record.shards[0].cause == exit_cause::stopped);
  CHECK(rec->record.shards[0].detail == "killed: the baton daemon was forced to stop");
}

TEST_CASE("a second daemon on the same state directory refuses, naming the first one's pid",
          "[unit][daemon]") {
  // Two daemons with different sockets once both started and ran the same queued jobs.
  fixture f("second-daemon", 1);
  f.start();
  const auto id = f.submit(job_doc("only", 1));
  auto second_options = f.options;
  second_options.settings.socket = f.dir / "other.sock";
  std::string second_log;
  second_options.hooks.log = [&](log_level, const std::string& m) { second_log += m + "\n"; };
  asio::io_context io2;
  baton::supervisor::daemon second(io2, f.files, second_options);
  auto s = second.start();
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "state directory " + state_dir.string() +
                                 " is in use by `baton serve` (pid " +
                                 std::to_string(baton::os::current_pid()) + "; lock file " +
                                 (state_dir / "baton.lock").string() +
                                 "); stop it first, or give this daemon another --state-dir");
  CHECK_FALSE(fs::exists(f.dir / "other.sock"));             // refused before it bound anything
  CHECK(second_log.find("recovered") == std::string::npos);  // and before it touched a job
  CHECK(second.running_count() == 0);
  REQUIRE(f.run_until([&] { return f.state(id) == "completed"; }));
  // Once the first is gone, the directory is free.
  f.d.reset();
  CHECK_FALSE(f.locker.is_held(state_dir));
  asio::io_context io3;
  auto third_options = second_options;
  baton::supervisor::daemon third(io3, f.files, third_options);
  CHECK(third.start());
}

TEST_CASE("a half-written submit found at start is removed and logged, not failed",
          "[unit][daemon]") {
  // A daemon killed mid-submit once left a phantom `failed` job with an unreadable record.
  fixture f("half-written", 1);
  const auto kept = f.make("kept", job_state::completed, 100);
  auto store = f.store();
  REQUIRE(f.files.create_dirs(store.checkpoint_dir("half-1")));
  REQUIRE(f.files.put(store.spec_path("half-1"), "{\"name\": \"half\"}"));
  REQUIRE(f.files.create_dirs(store.checkpoint_dir("bare-1")));
  f.start();
  auto list = f.call(list_call{});
  REQUIRE(list.status == 200);
  REQUIRE(list.body.at("jobs").size() == 1);
  CHECK(list.body["jobs"][0]["id"] == kept);
  CHECK(f.call(status_call{"half-1"}).status == 404);
  CHECK_THAT(f.log, Catch::Contains("job half-1: removed a half-written submit") &&
                        Catch::Contains("job bare-1: removed a half-written submit"));
  CHECK_THAT(f.log, Catch::Contains("0 to run, 0 paused, 0 failed"));
  CHECK_FALSE(f.files.file_exists(store.job_dir("half-1")));
  // Nobody was ever given that id: the next job of that name gets it.
  CHECK(f.submit(job_doc("half", 1)) == "half-1");
}

TEST_CASE("submit refuses jobs past the machine's limits, naming the field", "[unit][daemon]") {
  fixture f("limits", 1);
  f.options.settings.default_soft_limit_mib = 4096;
  f.options.settings.default_hard_limit_mib = 6144;
  f.start();
  const auto refused = [&](const json& doc) {
    auto r = f.call(submit_call{doc, base.string(), 0});
    INFO(r.body.dump());
    CHECK(r.status == 400);
    return r.body.value("error", "");
  };
  json threads = job_doc("threads", 1);
  threads["training"]["threads"] = 1'000'000;
  CHECK_THAT(refused(threads), Catch::StartsWith("training.threads: at most "));
  json units = job_doc("units", 1);
  units["model"]["layers"] = {{{"units", 1'000'000'000}, {"activation", "relu"}},
                              {{"units", 1}, {"activation", "sigmoid"}}};
  // The daemon's default_memory is what the job would run under.
  CHECK_THAT(refused(units), Catch::StartsWith("model.layers[0].units: the job needs at least ") &&
                                 Catch::EndsWith("more than memory.soft_limit_mib 4096 MiB"));
  json epochs = job_doc("epochs", 1);
  epochs["training"]["epochs"] = 1e18;
  CHECK_THAT(refused(epochs), Catch::StartsWith("training.epochs: expected a positive integer"));
  json folder = job_doc("folder", 1);
  REQUIRE(f.files.create_dirs(base / "data.csv"));
  folder["data"] = {{"type", "csv"}, {"path", "data.csv"}};
  CHECK(refused(folder) ==
        "data.path: expected a regular file, got a folder: " + (base / "data.csv").string());
  auto list = f.call(list_call{});
  CHECK(list.body.at("jobs").empty());
}

TEST_CASE("recovery: creation order, paused kept, damaged records failed", "[unit][daemon]") {
  fixture f("recover", 1);
  const auto late = f.make("late", job_state::running, 2000, 1, true);
  const auto early = f.make("early", job_state::backoff, 1000);
  const auto waiting = f.make("between", job_state::waiting, 3000);
  const auto paused = f.make("paused", job_state::paused, 500);
  const auto done = f.make("done", job_state::completed, 100);
  const auto broken = f.make("broken", job_state::queued, 50);
  const auto store = f.store();
  for (int slot = 0; slot < 2; ++slot) {
    REQUIRE(f.files.put(store.job_dir(broken) / ("record." + std::to_string(slot) + ".json"),
                        "{\"seq\": 1, \"digest\": \"x\", \"record\": {}}"));
  }

  f.start();
  // The oldest of the resumable jobs runs first, whatever its state was.
  CHECK(f.state(early) == "running");
  CHECK(f.d->queued_ids() == std::vector<std::string>{late, waiting});
  auto sl = f.status(late);
  CHECK(sl.at("state") == "queued");
  // Its interrupted worker is closed in the history, not left "running" forever.
  CHECK(sl["shards"][0]["cause"] == "stopped");
  CHECK(sl["shards"][0]["detail"] == "supervisor exited while the worker ran");
  CHECK(sl.at("exits_by_cause") == json{{"stopped", 1}});
  CHECK(f.state(paused) == "paused");
  CHECK(f.state(done) == "completed");
  auto sb = f.status(broken);
  CHECK(sb.at("state") == "failed");
  CHECK_THAT(sb.at("diagnosis").get<std::string>(), Catch::Contains("does not verify"));
  CHECK_THAT(f.log, Catch::Contains("job " + broken));
  CHECK_THAT(f.log, Catch::Contains("3 to run, 1 paused, 1 failed"));
  REQUIRE(f.run_until([&] {
    return f.state(late) == "completed" && f.state(early) == "completed" &&
           f.state(waiting) == "completed";
  }));
  // Saved as the machine left them: the next daemon sees the same.
  auto back = store.load(broken);
  REQUIRE(back);
  CHECK(back->record.state == job_state::failed);
}

TEST_CASE("a job whose spec no longer loads is failed at recovery, its shard closed",
          "[unit][daemon]") {
  fixture f("bad-spec", 1);
  const auto id = f.make("gone", job_state::running, 100, 1, true);
  REQUIRE(f.files.put(f.store().spec_path(id), "{not json"));
  f.start();
  const auto s = f.status(id);
  CHECK(s.at("state") == "failed");
  CHECK_THAT(s.at("diagnosis").get<std::string>(), Catch::StartsWith("job spec does not load: "));
  CHECK(s["shards"][0]["cause"] == "stopped");
  CHECK(f.d->queued_ids().empty());
  CHECK(f.launcher.workers.empty());
}

TEST_CASE("resume runs a paused job again, other states answer 409", "[unit][daemon]") {
  fixture f("resume", 1);
  const auto paused = f.make("paused", job_state::paused, 100, 2);
  const auto done = f.make("done", job_state::completed, 200);
  f.start();
  // A paused job stays paused across a daemon start: only the user knows when space is back.
  CHECK(f.state(paused) == "paused");
  CHECK(f.d->running_count() == 0);

  auto not_paused = f.call(resume_call{done});
  CHECK(not_paused.status == 409);
  CHECK(not_paused.body.at("error") ==
        "job '" + done + "' is completed; only a paused, failed or cancelled job can be resumed");
  CHECK(f.call(resume_call{"nope-1"}).status == 404);

  auto resumed = f.call(resume_call{paused});
  INFO(resumed.body.dump());
  CHECK(resumed.status == 202);
  CHECK(resumed.body.at("state") == "running");
  CHECK(f.status(paused).at("diagnosis") == "");
  CHECK_THAT(f.log, Catch::Contains("resumed at checkpoint step 0 (was paused: paused: disk full"));
  // Running now: a second resume is refused rather than starting a second worker.
  CHECK(f.call(resume_call{paused}).status == 409);
  REQUIRE(f.run_until([&] { return f.state(paused) == "completed"; }));
  auto rec = f.store().load(paused);
  REQUIRE(rec);
  CHECK(rec->record.state == job_state::completed);
  CHECK(rec->record.checkpoint_step == 16);
}

TEST_CASE("reload raises max_workers and starts queued jobs", "[unit][daemon]") {
  fixture f("reload", 1);
  int reloads = 0;
  f.options.reload_settings = [&]() -> baton::result<daemon_settings> {
    ++reloads;
    auto s = f.options.settings;
    s.max_workers = 2;
    s.level = log_level::debug;
    return s;
  };
  f.train(3);
  f.start();
  f.submit(job_doc("a", 100, 100));
  const auto b = f.submit(job_doc("b", 100, 100));
  CHECK(f.state(b) == "queued");
  f.d->reload();
  CHECK(reloads == 1);
  CHECK(f.d->settings().max_workers == 2);
  CHECK(f.d->settings().level == log_level::debug);
  CHECK(f.state(b) == "running");
  CHECK(f.d->running_count() == 2);
  f.d->shutdown_now();
  CHECK(f.stopped_code == 1);
  CHECK(f.d->running_count() == 0);
}

TEST_CASE("workers that cannot start fail the job after max_failures, with backoff",
          "[unit][daemon]") {
  fixture f("spawn-fails", 1);
  f.launcher.fail_spawns = "fake-trainer: not found";
  f.start();
  auto doc = job_doc("a", 1);
  doc["restart"] = {{"max_failures", 2}, {"backoff_initial_ms", 10}};
  const auto a = f.submit(doc);
  CHECK(f.state(a) == "backoff");  // the first failure, at once
  // The runner retires in a handler of its own after the job fails: wait for both.
  REQUIRE(f.run_until([&] { return f.state(a) == "failed" && f.d->running_count() == 0; }));
  const auto s = f.status(a);
  CHECK(s.at("diagnosis") ==
        "failed to start 2 times at step 0: spawn failed: fake-trainer: not found");
  CHECK(s.at("exits_by_cause") == json{{"spawn_failed", 2}});
  CHECK(f.d->running_count() == 0);
}

TEST_CASE("control_port is refused where the control API is a Unix socket", "[unit][daemon]") {
  fixture f("control-port");
  f.options.settings.control_port = 8080;
  auto d = std::make_unique<baton::supervisor::daemon>(f.io, f.files, f.options);
  auto s = d->start();
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("control_port: only used where the control API "
                                                "is loopback TCP (Windows)"));
  CHECK_FALSE(fs::exists(f.dir / "s.sock"));
}

TEST_CASE("rm deletes a job at rest, refuses a running one unless forced", "[unit][daemon]") {
  fixture f("rm", 1);
  f.start();
  f.train(5);
  const auto a = f.submit(job_doc("a", 200, 200));
  const auto b = f.submit(job_doc("b", 1));
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() > 0; }));
  // Queued: removed at once, out of the queue, its folder gone.
  auto r = f.call(remove_call{b, false});
  CHECK(r.status == 200);
  CHECK(r.body.at("removed") == true);
  CHECK(f.d->queued_ids().empty());
  CHECK(f.call(status_call{b}).status == 404);
  CHECK_FALSE(f.files.file_exists(state_dir / "jobs" / b));
  // Running: refused, naming the way out.
  r = f.call(remove_call{a, false});
  CHECK(r.status == 409);
  CHECK(r.body.at("error") ==
        "job '" + a +
            "' is running; cancel it first, or remove it with --force (which cancels it)");
  // Forced: cancelled first, removed once its worker is gone.
  r = f.call(remove_call{a, true});
  CHECK(r.status == 202);
  CHECK(r.body.at("removed") == false);
  REQUIRE(f.run_until([&] { return f.call(status_call{a}).status == 404; }));
  CHECK(f.d->running_count() == 0);
  CHECK_FALSE(f.files.file_exists(state_dir / "jobs" / a));
  REQUIRE(f.launcher.workers.size() == 1);
  CHECK(f.launcher.workers[0]->stop_received());
  CHECK(f.call(remove_call{a, false}).status == 404);
}

TEST_CASE("prune deletes finished jobs by state and age, and a dry run deletes nothing",
          "[unit][daemon]") {
  fixture f("prune", 2);
  f.start();
  const auto done = f.submit(job_doc("done", 1));
  REQUIRE(f.run_until([&] { return f.state(done) == "completed"; }));
  f.train(5);  // the later workers run until stopped
  const auto gone = f.submit(job_doc("gone", 200, 200));
  REQUIRE(f.run_until([&] { return f.state(gone) == "running"; }));
  REQUIRE(f.call(cancel_call{gone}).status == 202);
  REQUIRE(f.run_until([&] { return f.state(gone) == "cancelled" && f.d->running_count() == 0; }));
  const auto live = f.submit(job_doc("live", 200, 200));
  REQUIRE(f.run_until([&] { return f.state(live) == "running"; }));

  // Nothing is a day old yet.
  auto r = f.call(prune_call{86400000, {"completed", "failed", "cancelled"}, false});
  CHECK(r.body.at("removed").empty());
  r = f.call(prune_call{std::nullopt, {"cancelled"}, true});
  CHECK(r.body.at("removed") == json{gone});
  CHECK(f.call(status_call{gone}).status == 200);  // a dry run
  r = f.call(prune_call{});
  CHECK(r.status == 200);
  auto removed = r.body.at("removed").get<std::vector<std::string>>();
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{done, gone});
  CHECK(r.body.at("errors").empty());
  CHECK(f.call(status_call{done}).status == 404);
  CHECK(f.call(status_call{gone}).status == 404);
  CHECK(f.state(live) == "running");  // never a job that is not finished
}

TEST_CASE("a cancelled job resumes from its checkpoint, a completed one answers 409",
          "[unit][daemon]") {
  fixture f("resume-cancelled", 1);
  f.start();
  f.train(5);  // the first worker stops stepping at 5 and checkpoints when told to stop
  const auto a = f.submit(job_doc("a", 4, 1));
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() >= 5; }));
  REQUIRE(f.call(cancel_call{a}).status == 202);
  REQUIRE(f.run_until([&] { return f.state(a) == "cancelled" && f.d->running_count() == 0; }));
  const auto at = f.status(a).at("checkpoint_step").get<int>();
  f.train(0);
  auto r = f.call(resume_call{a});
  CHECK(r.status == 202);
  REQUIRE(f.run_until([&] { return f.state(a) == "completed"; }));
  const auto s = f.status(a);
  CHECK(s.at("checkpoint_step").get<int>() == 32);
  // The first worker after the resume started from the cancel's checkpoint.
  REQUIRE(s.at("shards").size() >= 2);
  CHECK(s.at("shards")[1].at("start_step").get<int>() == at);
  CHECK(f.call(resume_call{a}).status == 409);
  // The resume happened at rest, with no runner to note it: the history has it all the same,
  // after the cancelled worker's exit and before the next spawn.
  const auto history = f.call(history_call{a, 0});
  std::vector<std::string> kinds;
  for (const auto& e : history.body.at("events")) kinds.push_back(e.at("kind").get<std::string>());
  INFO(nlohmann::json(kinds).dump());
  const auto resumed = std::find(kinds.begin(), kinds.end(), "resume");
  REQUIRE(resumed != kinds.end());
  CHECK(std::find(kinds.begin(), resumed, "cancel") != resumed);
  CHECK(std::find(resumed, kinds.end(), "spawn") != kinds.end());

  // A queued job cancelled before it ever ran: its history says so.
  f.train(5);
  const auto b = f.submit(job_doc("b", 200, 200));
  const auto c = f.submit(job_doc("c", 1));
  REQUIRE(f.call(cancel_call{c}).status == 202);
  const auto events = f.call(history_call{c, 0}).body.at("events");
  REQUIRE(events.size() == 1);
  CHECK(events[0].at("kind") == "cancel");
  REQUIRE(f.call(cancel_call{b}).status == 202);
  REQUIRE(f.run_until([&] { return f.d->running_count() == 0; }));
}

TEST_CASE("without http_listen the dashboard call says how to turn it on", "[unit][daemon]") {
  fixture f("no-dashboard", 1);
  f.start();
  const auto r = f.call(dashboard_call{});
  CHECK(r.status == 404);
  CHECK(r.body.at("error") ==
        "the dashboard is off: set http_listen in the daemon's settings (e.g. \"127.0.0.1:9464\") "
        "and restart it");
}
