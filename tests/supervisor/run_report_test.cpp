#include "supervisor/run_report.h"

#include <catch2/catch.hpp>

#include "supervisor/job_status.h"

using namespace baton::supervisor;

namespace {
job_record sample() {
  job_record r;
  r.id = "seed";
  r.name = "seed";
  r.state = job_state::completed;
  r.total_steps = 3140;
  r.checkpoint_step = 3140;
  r.checkpoint_path = "/s/jobs/seed/checkpoints/ckpt-000000003140.safetensors";
  r.exits_by_cause = {{"completed", 20}, {"memory_soft", 2}};
  r.metrics = {{"loss", 0.125}, {"accuracy", 0.99}};
  shard_record s;
  s.index = 0;
  s.pid = 77;
  s.start_step = 0;
  s.end_step = 157;
  s.cause = exit_cause::memory_soft;
  s.detail = "exit code 3";
  s.peak_rss_bytes = 1100ll << 20;
  s.leak_bytes_per_step = 50.0 * (1 << 20);
  r.shards.push_back(s);
  return r;
}
}  // namespace

TEST_CASE("durations read like a person would write them", "[unit][run_report]") {
  CHECK(format_duration(12.44) == "12.4s");
  CHECK(format_duration(187) == "3m07s");
  CHECK(format_duration(3725) == "1h02m");
  CHECK(format_duration(-1) == "?");
  CHECK(format_mib(1100ll << 20) == "1100 MiB");
}

TEST_CASE("the progress line shows step, loss, memory against the budget and restarts",
          "[unit][run_report]") {
  auto r = sample();
  r.state = job_state::running;
  live_status l;
  l.pid = 4242;
  l.step = 471;
  l.total_steps = 3140;
  l.epoch = 2;
  l.loss = 0.23456;
  l.metrics = {{"accuracy", 0.9123}};
  l.rss_bytes = 412ll << 20;
  l.samples_per_sec = 1234.5;
  const auto line = format_progress_line({r, l, 1024, 2048, 10.0});
  CHECK(line ==
        "shard 0 (pid 4242) | step 471/3140 epoch 3 | loss 0.2346 acc 0.912 | rss 412/1024 MiB | "
        "1234 samples/s | ETA 4m27s | recycles 2");
}

TEST_CASE("the summary lists every worker with its exit cause, peak and leak",
          "[unit][run_report]") {
  const auto text = format_summary(sample(), 62.0);
  CHECK(text.find("job seed: completed after 1m02s, step 3140/3140, 1 worker\n") == 0);
  // One unit per column, in the header: no "1020 B" next to "0.01 MiB".
  CHECK(text.find("peak MiB    leak MiB/step") != std::string::npos);
  CHECK(text.find("memory_soft      1100.0            50.00  exit code 3") != std::string::npos);
  CHECK(text.find("restarts: 2 recycles, 0 failures, 0 user stops\n") != std::string::npos);
  // The sample's shard has no recorded curve: the job-wide estimate says so.
  CHECK(text.find("leak: not enough samples (0 in the steady part") != std::string::npos);
  CHECK(text.find("exits: completed 20 memory_soft 2") != std::string::npos);
  CHECK(text.find("checkpoint: /s/jobs/seed/checkpoints/ckpt-000000003140.safetensors") !=
        std::string::npos);
  const auto j = summary_json(sample(), 62.0);
  CHECK(j["state"] == "completed");
  CHECK(j["restarts_by_cause"] == nlohmann::json{{"memory_soft", 2}});
  CHECK(j["shards"][0]["cause"] == "memory_soft");
  CHECK(j["shards"][0]["peak_rss_bytes"] == (1100ll << 20));
  CHECK(j["restarts"] == nlohmann::json{{"recycle", 2}, {"failure", 0}, {"user", 0}});
  CHECK(j["leak_bytes_per_step"].is_null());
  CHECK(j["leak_note"].get<std::string>().find("not enough samples") == 0);
}

TEST_CASE("a leak rate prints in MiB per step with its interval, or a dash", "[unit][run_report]") {
  CHECK(format_leak_mib(1.02 * 1048576, 0.031 * 1048576) == "1.02 +- 0.03");
  CHECK(format_leak_mib(-0.001, 0.0) == "0.00 +- 0.00");  // never "-0.00"
  CHECK(format_leak_mib(0.25 * 1048576, std::nullopt) == "0.25");
  CHECK(format_leak_mib(std::nullopt, std::nullopt) == "-");
  CHECK(format_peak_mib(0) == "-");  // nothing measured is not "0 MiB"
  CHECK(format_peak_mib(1536 * 1024) == "1.5");
}

TEST_CASE("restarts split planned recycles from failures and user stops", "[unit][run_report]") {
  job_record r;
  r.exits_by_cause = {{"completed", 3},   {"memory_soft", 4}, {"memory_budget", 1},
                      {"memory_hard", 1}, {"crashed", 2},     {"stalled", 1},
                      {"stopped", 1},     {"cancelled", 1},   {"spawn_failed", 1}};
  const auto c = count_restarts(r);
  CHECK(c.recycles == 6);
  CHECK(c.failures == 4);
  CHECK(c.user_stops == 1);
  CHECK(format_restarts(c) == "6 recycles, 4 failures, 1 user stop");
  CHECK(format_restarts({1, 1, 0}) == "1 recycle, 1 failure, 0 user stops");
}

TEST_CASE("an unknown total (a command worker's job before its first progress) shows no total",
          "[unit][run_report]") {
  auto r = sample();
  r.state = job_state::running;
  r.total_steps = 0;
  r.checkpoint_step = 40;
  live_status l;
  l.pid = 4242;
  l.step = 40;
  l.loss = 0.5;
  l.rss_bytes = 100ll << 20;
  const auto line = format_progress_line({r, l, 0, 0, 10.0});
  // No "/0", no percentage and no ETA computed from a total nobody knows.
  CHECK(line == "shard 0 (pid 4242) | step 40 epoch 1 | loss 0.5000 | rss 100 MiB | recycles 2");
  CHECK(format_summary(r, 5.0).find("job seed: running after 5.0s, step 40, 1 worker\n") == 0);
  CHECK(summary_json(r, 5.0)["total_steps"] == 0);
}

TEST_CASE("run --json and status --json show a shard with the same keys and types",
          "[unit][run_report]") {
  auto r = sample();
  r.shards[0].rss = {{0, 100 << 20, 0}, {50, 101 << 20, 2}};
  shard_record open;  // a worker still running: its cause is null in both
  open.index = 1;
  open.start_step = 157;
  r.shards.push_back(open);
  const auto run = summary_json(r, 1.0);
  const auto status = job_status_json(r, nullptr, 256, 512);
  CHECK(run.at("schema_version") == 1);
  CHECK(status.at("schema_version") == 1);
  REQUIRE(run.at("shards").size() == 2);
  REQUIRE(status.at("shards").size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& a = run["shards"][i];
    const auto& b = status["shards"][i];
    REQUIRE(a.size() == b.size());
    for (const auto& [key, value] : a.items()) {
      INFO("shard " << i << " key " << key);
      REQUIRE(b.contains(key));
      CHECK(value.type() == b.at(key).type());
      CHECK(value == b.at(key));
    }
  }
  CHECK(run["shards"][0].at("cause") == "memory_soft");
  CHECK(run["shards"][1].at("cause").is_null());
  CHECK_FALSE(run["shards"][0].contains("exit_cause"));
  // The job's own fields: what run prints, status prints under the same name and type; only
  // the run's wall time and its per-cause restart map are run's alone.
  for (const auto& [key, value] : run.items()) {
    if (key == "wall_seconds" || key == "restarts_by_cause") continue;
    INFO("key " << key);
    REQUIRE(status.contains(key));
    CHECK(value.type() == status.at(key).type());
  }
}

TEST_CASE("the summary colours the state and exit causes only when asked", "[unit][run_report]") {
  auto r = sample();
  r.state = job_state::failed;
  r.shards[0].cause = exit_cause::crashed;
  const auto painted = format_summary(r, 62.0, true);
  CHECK(painted.find("job seed: \x1b[31mfailed\x1b[0m after 1m02s") == 0);
  CHECK_THAT(painted, Catch::Contains("\x1b[31mcrashed\x1b[0m          1100.0"));
  const auto plain = format_summary(r, 62.0, false);
  CHECK(plain.find('\x1b') == std::string::npos);
  CHECK_THAT(plain, Catch::Contains("  crashed          1100.0"));
  live_status l;
  l.pid = 1;
  r.exits_by_cause = {{"crashed", 2}};
  progress_view v{r, l};
  CHECK_THAT(format_progress_line(v), Catch::EndsWith("| recycles 0 failures 2"));
  v.colour = true;
  CHECK_THAT(format_progress_line(v), Catch::EndsWith("| recycles 0 \x1b[31mfailures 2\x1b[0m"));
}
