#include "supervisor/job_status.h"

#include <catch2/catch.hpp>

#include "os/mem_env.h"
#include "supervisor/job_log_writer.h"
#include "support/test_paths.h"

using namespace baton::supervisor;

TEST_CASE("status JSON adds live progress, limits, peak RSS and the leak rate",
          "[unit][job_status]") {
  job_record r;
  r.id = "j-1";
  r.state = job_state::running;
  r.checkpoint_step = 40;
  shard_record done;
  done.cause = exit_cause::memory_soft;
  done.peak_rss_bytes = 300 << 20;
  done.leak_bytes_per_step = 1 << 20;
  shard_record now;
  now.peak_rss_bytes = 100 << 20;
  // Steps 40..47, 2 MiB a step; the first and the newest step are left out as not steady.
  for (int i = 0; i < 8; ++i) now.rss.push_back({i * 100, (50 + 2 * i) << 20, 40 + i});
  r.shards = {done, now};
  live_status live;
  live.pid = 42;
  live.step = 44;
  live.loss = 0.5;
  live.rss_bytes = 58 << 20;
  auto j = job_status_json(r, &live, 128, 256);
  CHECK(j.at("state") == "running");
  CHECK(j.at("step") == 44);
  CHECK(j.at("live").at("pid") == 42);
  CHECK(j.at("live").at("rss_bytes") == 58 << 20);
  CHECK(j.at("peak_rss_bytes") == 300 << 20);
  CHECK(j.at("leak_bytes_per_step").get<double>() == Approx(2 << 20));
  CHECK(j.at("leak_ci95_bytes_per_step").get<double>() == Approx(0.0).margin(1.0));
  CHECK(j.at("leak_workers") == 1);
  CHECK(j.at("leak_note").is_null());
  CHECK(j.at("restarts") == nlohmann::json{{"recycle", 0}, {"failure", 0}, {"user", 0}});
  CHECK(j.at("soft_limit_mib") == 128);
  CHECK(j.at("shards").size() == 2);
  auto idle = job_status_json(r, nullptr, std::nullopt, std::nullopt);
  CHECK(idle.at("live").is_null());
  CHECK(idle.at("step") == 40);
  CHECK(idle.at("hard_limit_mib").is_null());
}

TEST_CASE("the job's leak is pooled over workers, not read off the newest one",
          "[unit][job_status]") {
  // Three workers, 1 MiB a step each, each starting again from 100 MiB: a fit over all the points
  // would see the drops at each recycle; the pooled fit gives every worker its own intercept.
  job_record r;
  r.exits_by_cause = {{"memory_soft", 2}, {"crashed", 1}, {"stopped", 1}};
  for (int w = 0; w < 3; ++w) {
    shard_record s;
    s.cause = exit_cause::memory_soft;
    for (int i = 0; i < 10; ++i) {
      const std::int64_t step = w * 10 + i;
      s.rss.push_back({i * 100, (100 + i) * (1 << 20) + (i % 2) * 4096, step});
    }
    r.shards.push_back(s);
  }
  // A fourth, short worker that only started: its curve is start-up and adds nothing.
  shard_record tail;
  tail.rss = {{0, 20 << 20, 30}, {100, 90 << 20, 30}};
  r.shards.push_back(tail);
  const auto j = job_status_json(r, nullptr, std::nullopt, std::nullopt);
  CHECK(j.at("leak_bytes_per_step").get<double>() == Approx(1 << 20).epsilon(0.01));
  CHECK(j.at("leak_workers") == 3);
  CHECK(j.at("restarts") == nlohmann::json{{"recycle", 2}, {"failure", 1}, {"user", 1}});

  job_record young;
  shard_record first;
  first.rss = {{0, 20 << 20, 0}, {100, 90 << 20, 0}, {200, 91 << 20, 1}};
  young.shards = {first};
  const auto k = job_status_json(young, nullptr, std::nullopt, std::nullopt);
  CHECK(k.at("leak_bytes_per_step").is_null());
  CHECK(k.at("leak_ci95_bytes_per_step").is_null());
  CHECK(k.at("leak_note").get<std::string>().find("not enough samples") == 0);
}

TEST_CASE("a failed or crashed job's status carries its log's path and last lines",
          "[unit][job_status]") {
  job_record r;
  r.id = "j-1";
  r.state = job_state::backoff;
  shard_record crashed;
  crashed.cause = exit_cause::crashed;
  r.shards = {crashed};
  CHECK(shows_log_tail(r));
  r.shards[0].cause = exit_cause::memory_soft;  // a recycle is no failure
  CHECK_FALSE(shows_log_tail(r));
  r.state = job_state::failed;
  CHECK(shows_log_tail(r));
  r.state = job_state::running;
  r.shards = {shard_record{}};  // running: no cause yet
  CHECK_FALSE(shows_log_tail(r));

  const log_view log{"/s/jobs/j-1/worker.log", {"Traceback (most recent call last):", "boom"}};
  auto j = job_status_json(r, nullptr, std::nullopt, std::nullopt, &log);
  CHECK(j.at("log_path") == "/s/jobs/j-1/worker.log");
  CHECK(j.at("log_tail") == nlohmann::json{"Traceback (most recent call last):", "boom"});
  const log_view quiet{"/s/jobs/j-1/worker.log", {}};
  j = job_status_json(r, nullptr, std::nullopt, std::nullopt, &quiet);
  CHECK(j.at("log_tail").is_null());
  CHECK_FALSE(job_status_json(r, nullptr, std::nullopt, std::nullopt).contains("log_tail"));
}

TEST_CASE("worker_log_view: the log's path always, its last lines only when they explain a failure",
          "[unit][job_status]") {
  baton::os::mem_env e;
  const auto state = baton::test::abs_path("/s");
  job_store store(e, state);
  job_record r;
  r.id = "j-1";
  REQUIRE(e.create_dirs(store.job_dir(r.id)));
  {
    job_log_writer w(e, store.log_path(r.id));
    for (const char* line : {"[baton] worker 7 started at step 0",
                             "Traceback (most recent call "
                             "last):",
                             "ValueError: boom", "[baton] worker 7 ended: crashed"}) {
      REQUIRE(w.add_line(line));
    }
  }
  r.state = job_state::failed;
  auto v = worker_log_view(e, store, r);
  CHECK(v.path == store.log_path(r.id).string());
  CHECK(v.tail ==
        std::vector<std::string>{"Traceback (most recent call last):", "ValueError: boom"});
  r.state = job_state::completed;
  v = worker_log_view(e, store, r);
  CHECK(v.path == store.log_path(r.id).string());
  CHECK(v.tail.empty());
}
