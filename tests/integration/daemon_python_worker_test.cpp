// The daemon in-process with real workers (the example Python trainer) on the real disk: the
// same decisions tests/supervisor/daemon_test.cpp checks on fakes, here with processes, pipes
// and signals that can only fail for real.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "os/env.h"
#include "protocol/job_spec.h"
#include "supervisor/daemon.h"
#include "supervisor/job_store.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace daemon_python_worker_test {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-daemon-python-test-" + name);
}

using baton::test::python;

// A job for the example Python worker: `epochs` epochs of 8 steps each, one shard per
// `shard_epochs`. Small enough to finish in about a second.
json job_doc(const std::string& name, int epochs, int shard_epochs = 1) {
  return {
      {"name", name},
      {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 64},
        {"epochs", epochs}}},
      {"shard", {{"epochs", shard_epochs}}},
      {"memory", {{"poll_ms", 10}}},
      {"worker",
       {{"command",
         {python(), std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/train.py"}}}}};
}

struct fixture {
  explicit fixture(const std::string& name, int max_workers = 1) : dir(scratch(name)) {
    options.settings.state_dir = dir / "state";
    options.settings.socket = dir / "s.sock";
    options.settings.max_workers = max_workers;
    options.handle_signals = false;
    options.become_subreaper = false;
    options.hooks.log = [this](log_level, const std::string& m) { log += m + "\n"; };
    options.hooks.on_stopped = [this](int code) {
      stopped_code = code;
      io.stop();
    };
  }

  void start() {
    d = std::make_unique<baton::supervisor::daemon>(io, baton::os::env::default_env(), options);
    REQUIRE(d->start());
  }

  api_response call(const api_call& c) { return d->handle(c); }

  json status(const std::string& id) {
    auto r = call(status_call{id});
    REQUIRE(r.status == 200);
    return r.body;
  }

  std::string submit(const json& doc) {
    auto r = call(submit_call{doc, dir.string(), 0});
    INFO(r.body.dump());
    REQUIRE(r.status == 201);
    return r.body.at("id").get<std::string>();
  }

  // Runs the io_context until `done` holds (checked every 20 ms) or the deadline passes.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 20s) {
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
      t.expires_after(20ms);
      t.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) check();
      });
    };
    check();
    io.restart();
    io.run();
    io.restart();
    return ok;
  }

  std::string state(const std::string& id) { return status(id).at("state").get<std::string>(); }

  fs::path dir;
  asio::io_context io;
  daemon_options options;
  std::unique_ptr<baton::supervisor::daemon> d;
  std::string log;
  std::optional<int> stopped_code;
};

TEST_CASE("submit validates the spec and answers every error line, with real workers",
          "[integration][daemon]") {
  fixture f("submit");
  f.start();
  auto doc = job_doc("bad", 1);
  doc["training"]["batch_size"] = -3;
  doc["shard"] = {{"epochs", 1}, {"stepz", 2}};
  auto r = f.call(submit_call{doc, f.dir.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("training.batch_size"));
  REQUIRE(r.body.at("errors").size() >= 2);

  auto missing = job_doc("csv", 1);
  missing["data"] = {{"type", "csv"}, {"path", "nope.csv"}};
  r = f.call(submit_call{missing, f.dir.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(),
             Catch::Contains("data.path: file not found: " + (f.dir / "nope.csv").string()));

  // Without a built-in worker, a job must bring its own command.
  auto builtin = job_doc("builtin", 1);
  builtin.erase("worker");
  r = f.call(submit_call{builtin, f.dir.string(), 0});
  CHECK(r.status == 400);
  CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("worker.command: required"));

  CHECK(f.submit(job_doc("ok", 1)) == "ok-1");
  CHECK(f.submit(job_doc("ok", 1)) == "ok-2");
  auto list = f.call(list_call{});
  REQUIRE(list.status == 200);
  REQUIRE(list.body.at("jobs").size() == 2);
  CHECK(list.body["jobs"][0]["id"] == "ok-1");
  CHECK(f.call(status_call{"nope"}).status == 404);
  CHECK(f.call(logs_call{"nope", 0}).status == 404);
  CHECK(f.call(cancel_call{"nope"}).status == 404);
  auto health = f.call(health_call{});
  CHECK(health.body.at("status") == "ok");
  CHECK(health.body.at("running") == 1);
  CHECK(health.body.at("queued") == 1);
}

TEST_CASE("jobs run FIFO within max_workers and complete, with real workers",
          "[integration][daemon]") {
  fixture f("fifo", 1);
  f.start();
  const auto a = f.submit(job_doc("a", 2));
  const auto b = f.submit(job_doc("b", 2));
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
  // b's first worker started only after a's last one ended.
  CHECK(rb["shards"][0]["started_ms"].get<std::int64_t>() >=
        ra["shards"].back()["ended_ms"].get<std::int64_t>());
  CHECK(ra.at("peak_rss_bytes").get<std::int64_t>() > 0);

  // The log pages through the worker's stderr and the supervisor's events.
  auto logs = f.call(logs_call{a, 0});
  REQUIRE(logs.status == 200);
  CHECK_THAT(logs.body.at("data").get<std::string>(), Catch::Contains("job completed"));
  CHECK(logs.body.at("state") == "completed");
  CHECK(logs.body.at("next_offset") == logs.body.at("size"));

  CHECK(f.call(cancel_call{a}).status == 409);  // already completed
}

TEST_CASE("cancel: a queued job never starts, a running one stops, with real workers",
          "[integration][daemon]") {
  fixture f("cancel", 1);
  f.start();
  const auto a = f.submit(job_doc("a", 200, 200));
  const auto b = f.submit(job_doc("b", 1));
  auto r = f.call(cancel_call{b});
  CHECK(r.status == 202);
  CHECK(r.body.at("state") == "cancelled");
  CHECK(f.d->queued_ids().empty());
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() > 0; }));
  r = f.call(cancel_call{a});
  CHECK(r.status == 202);
  // Cancelled, and the runner handed back (its rest is posted after the state changes).
  REQUIRE(f.run_until([&] { return f.state(a) == "cancelled" && f.d->running_count() == 0; }));
  CHECK(f.d->running_count() == 0);
  CHECK(f.status(b).at("shards").empty());
}

TEST_CASE("shutdown checkpoints running jobs and leaves them queued on disk, with real workers",
          "[integration][daemon]") {
  fixture f("shutdown", 2);
  f.start();
  const auto a = f.submit(job_doc("a", 400, 400));
  const auto b = f.submit(job_doc("b", 1));
  (void)b;
  REQUIRE(f.run_until([&] { return f.status(a).at("step").get<int>() >= 10; }));
  f.d->shutdown();
  CHECK(f.d->stopping());
  f.io.restart();
  f.io.run_for(20s);
  REQUIRE(f.stopped_code == 0);
  f.d.reset();

  baton::os::env& e = baton::os::env::default_env();
  job_store store(e, f.dir / "state");
  auto rec = store.load(a);
  REQUIRE(rec);
  CHECK(rec->record.state == job_state::queued);
  CHECK(rec->record.diagnosis.empty());
  CHECK(rec->record.checkpoint_step >= 10);
  REQUIRE_FALSE(rec->record.shards.empty());
  CHECK(rec->record.shards.back().cause == exit_cause::stopped);
}

TEST_CASE("recovery: creation order, paused kept, damaged records failed, with real workers",
          "[integration][daemon]") {
  fixture f("recover", 1);
  baton::os::env& e = baton::os::env::default_env();
  job_store store(e, f.options.settings.state_dir);
  REQUIRE(store.open());
  auto make = [&](const std::string& name, job_state st, std::int64_t created) {
    auto spec = baton::protocol::parse_job_spec(job_doc(name, 1).dump(), f.dir);
    REQUIRE(spec);
    auto r = store.create(*spec, 8);
    REQUIRE(r);
    r->state = st;
    r->created_ms = created;
    if (st == job_state::running) {
      shard_record s;
      s.pid = 999999;
      s.started_ms = created;
      r->shards.push_back(s);
    }
    REQUIRE(store.save(*r));
    return r->id;
  };
  const auto late = make("late", job_state::running, 2000);
  const auto early = make("early", job_state::backoff, 1000);
  const auto paused = make("paused", job_state::paused, 500);
  const auto done = make("done", job_state::completed, 100);
  const auto broken = make("broken", job_state::queued, 50);
  for (int slot = 0; slot < 2; ++slot) {
    std::ofstream(store.job_dir(broken) / ("record." + std::to_string(slot) + ".json"))
        << "{\"seq\": 1, \"digest\": \"x\", \"record\": {}}";
  }

  f.start();
  // The older of the two resumable jobs runs first, whatever its state was.
  CHECK(f.state(early) == "running");
  CHECK(f.d->queued_ids() == std::vector<std::string>{late});
  auto sl = f.status(late);
  CHECK(sl.at("state") == "queued");
  // Its interrupted worker is closed in the history, not left "running" forever.
  CHECK(sl["shards"][0]["cause"] == "stopped");
  CHECK(f.state(paused) == "paused");
  CHECK(f.state(done) == "completed");
  auto sb = f.status(broken);
  CHECK(sb.at("state") == "failed");
  CHECK_THAT(sb.at("diagnosis").get<std::string>(), Catch::Contains("does not verify"));
  CHECK_THAT(f.log, Catch::Contains("job " + broken));
  REQUIRE(f.run_until([&] { return f.state(late) == "completed"; }));
  CHECK(f.state(early) == "completed");
}

TEST_CASE("resume runs a paused job again, other states answer 409, with real workers",
          "[integration][daemon]") {
  fixture f("resume", 1);
  baton::os::env& e = baton::os::env::default_env();
  job_store store(e, f.options.settings.state_dir);
  REQUIRE(store.open());
  auto make = [&](const std::string& name, job_state st) {
    auto spec = baton::protocol::parse_job_spec(job_doc(name, 2).dump(), f.dir);
    REQUIRE(spec);
    auto r = store.create(*spec, 16);
    REQUIRE(r);
    r->state = st;
    if (st == job_state::paused) r->diagnosis = "paused: disk full: No space left on device";
    REQUIRE(store.save(*r));
    return r->id;
  };
  const auto paused = make("paused", job_state::paused);
  const auto done = make("done", job_state::completed);
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
  auto rec = store.load(paused);
  REQUIRE(rec);
  CHECK(rec->record.state == job_state::completed);
  CHECK(rec->record.checkpoint_step == 16);
}

TEST_CASE("reload raises max_workers and starts queued jobs, with real workers",
          "[integration][daemon]") {
  fixture f("reload", 1);
  int reloads = 0;
  f.options.reload_settings = [&]() -> baton::result<daemon_settings> {
    ++reloads;
    auto s = f.options.settings;
    s.max_workers = 2;
    s.level = log_level::debug;
    return s;
  };
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

}  // namespace daemon_python_worker_test
