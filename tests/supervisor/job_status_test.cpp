#include "supervisor/job_status.h"

#include <catch2/catch.hpp>

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
  for (int i = 0; i < 5; ++i) now.rss.push_back({i * 100, (50 + 2 * i) << 20, 40 + i});
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
  CHECK(j.at("soft_limit_mib") == 128);
  CHECK(j.at("shards").size() == 2);
  auto idle = job_status_json(r, nullptr, std::nullopt, std::nullopt);
  CHECK(idle.at("live").is_null());
  CHECK(idle.at("step") == 40);
  CHECK(idle.at("hard_limit_mib").is_null());
}
