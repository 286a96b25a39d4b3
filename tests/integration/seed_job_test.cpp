// The reference workload end to end, as ./run.sh runs it: configs/seed.json under `baton run`,
// 20 epochs in 20 shards, each in a fresh worker process, with flat memory from shard to shard.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "os/env.h"
#include "supervisor/job_store.h"
#include "support/run_process.h"

namespace fs = std::filesystem;

TEST_CASE("configs/seed.json runs 20 shards in 20 fresh workers with flat RSS",
          "[integration][seed]") {
  const auto dir = fs::temp_directory_path() / "baton-seed-job-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = baton::test::run_process(
      {BATON_EXE, "run", std::string(BATON_SOURCE_DIR) + "/configs/seed.json", "--state-dir",
       (dir / "state").string(), "--json", "--worker", BATON_WORKER_EXE},
      {}, dir / "stderr.log", std::chrono::seconds(900));
  REQUIRE_FALSE(r.timed_out);
  INFO(r.out);
  const auto s = nlohmann::json::parse(r.out);
  CHECK(r.status == baton::os::exit_status::exited(0));
  CHECK(s["state"] == "completed");
  CHECK(s["checkpoint_step"] == 3140);
  REQUIRE(s["shards"].size() == 20);
  std::set<std::int64_t> pids;
  for (std::size_t i = 0; i < 20; ++i) {
    const auto& shard = s["shards"][i];
    CHECK(shard["cause"] == "completed");
    CHECK(shard["start_step"] == static_cast<std::int64_t>(157 * i));
    CHECK(shard["end_step"] == static_cast<std::int64_t>(157 * (i + 1)));
    pids.insert(shard["pid"].get<std::int64_t>());
  }
  CHECK(pids.size() == 20);  // every shard in a fresh process

  // Flat: each worker's typical (median) RSS while it trains is the same from the first shard
  // to the last; a leak across shards or inside the trainer would make it climb. Peaks are
  // compared loosely: a 100 ms sampler catches the short checkpoint transients only sometimes.
  baton::supervisor::job_store store(baton::os::env::default_env(), dir / "state");
  auto rec = store.load("seed");
  REQUIRE(rec);
  std::int64_t lo = INT64_MAX, hi = 0;
  for (const auto& shard : rec->record.shards) {
    std::vector<std::int64_t> rss;
    for (const auto& p : shard.rss) rss.push_back(p.bytes);
    if (rss.size() < 3) continue;  // a shard too short to sample says nothing
    std::nth_element(rss.begin(), rss.begin() + rss.size() / 2, rss.end());
    const auto median = rss[rss.size() / 2];
    lo = std::min(lo, median);
    hi = std::max(hi, median);
    CHECK(shard.peak_rss_bytes < 2 * median);
  }
  REQUIRE(hi > 0);
  CHECK(hi < lo * 6 / 5);
  CHECK(s["metrics"]["accuracy"].get<double>() > 0.9);
  fs::remove_all(dir);
}
