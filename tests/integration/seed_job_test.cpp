// The reference workload end to end, as ./run.sh runs it: configs/seed.json under `baton run`,
// 20 epochs in 20 shards, each in a fresh worker process, with flat memory from shard to shard.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "support/run_process.h"

namespace fs = std::filesystem;

TEST_CASE("configs/seed.json runs 20 shards in 20 fresh workers with flat RSS",
          "[integration][seed]") {
  const auto dir = fs::temp_directory_path() / "baton-seed-job-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = baton::testing::run_process(
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
  std::int64_t lo = INT64_MAX, hi = 0;
  for (std::size_t i = 0; i < 20; ++i) {
    const auto& shard = s["shards"][i];
    CHECK(shard["exit_cause"] == "completed");
    CHECK(shard["start_step"] == static_cast<std::int64_t>(157 * i));
    CHECK(shard["end_step"] == static_cast<std::int64_t>(157 * (i + 1)));
    pids.insert(shard["pid"].get<std::int64_t>());
    // Shard 0 starts fresh; the others also hold the checkpoint they resume from for a moment.
    if (i == 0) continue;
    const auto peak = shard["peak_rss_bytes"].get<std::int64_t>();
    lo = std::min(lo, peak);
    hi = std::max(hi, peak);
  }
  CHECK(pids.size() == 20);  // every shard in a fresh process
  // Flat: no resuming shard peaks far above another (a leak across shards would grow them), and
  // the fresh first shard is no higher than they are.
  CHECK(hi < lo * 3 / 2);
  CHECK(s["shards"][0]["peak_rss_bytes"].get<std::int64_t>() <= hi * 11 / 10);
  CHECK(s["metrics"]["accuracy"].get<double>() > 0.9);
  fs::remove_all(dir);
}
