#include "supervisor/run_report.h"

#include <catch2/catch.hpp>

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
        "1234 samples/s | ETA 4m27s | restarts 2");
}

TEST_CASE("the summary lists every worker with its exit cause, peak and leak",
          "[unit][run_report]") {
  const auto text = format_summary(sample(), 62.0);
  CHECK(text.find("job seed: completed after 1m02s, step 3140/3140, 1 worker\n") == 0);
  CHECK(text.find("memory_soft    1100 MiB      50.00 MiB  exit code 3") != std::string::npos);
  CHECK(text.find("exits: completed 20 memory_soft 2") != std::string::npos);
  CHECK(text.find("checkpoint: /s/jobs/seed/checkpoints/ckpt-000000003140.safetensors") !=
        std::string::npos);
  const auto j = summary_json(sample(), 62.0);
  CHECK(j["state"] == "completed");
  CHECK(j["restarts_by_cause"] == nlohmann::json{{"memory_soft", 2}});
  CHECK(j["shards"][0]["exit_cause"] == "memory_soft");
  CHECK(j["shards"][0]["peak_rss_bytes"] == (1100ll << 20));
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
  CHECK(line == "shard 0 (pid 4242) | step 40 epoch 1 | loss 0.5000 | rss 100 MiB | restarts 2");
  CHECK(format_summary(r, 5.0).find("job seed: running after 5.0s, step 40, 1 worker\n") == 0);
  CHECK(summary_json(r, 5.0)["total_steps"] == 0);
}
