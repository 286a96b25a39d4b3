// A worker's stderr through the daemon as a user sees it: a worker that floods stderr under a
// small log_max_mib costs a bounded amount of disk and its job still completes; `baton logs`
// reads across the rotation, with or without the stored stamps.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "supervisor/job_log.h"
#include "supervisor/job_log_writer.h"
#include "support/daemon_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using baton::test::daemon_process;
using baton::test::python;
using baton::test::read_text;
using baton::test::run_baton;
using baton::test::take_err;
using baton::test::trim;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace worker_log_test {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST_CASE("a worker flooding stderr leaves at most (keep + 1) * log_max_mib on disk and completes",
          "[integration][worker_log]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-itest-worker-log");
  const auto err = dir / "client.err";
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << R"({"log_max_mib": 1, "log_keep": 2})";
  daemon_process d(dir, {"--settings", settings.string()});
  const auto sock = d.socket().string();
  const json job = {{"name", "flood"},
                    {"worker",
                     {{"command",
                       {python(), std::string(BATON_SOURCE_DIR) +
                                      "/tests/integration/workers/flood_worker.py"}}}},
                    {"shard", {{"steps", 3}}},
                    {"memory", {{"poll_ms", 50}}},
                    {"params", {{"total_steps", 3}, {"flood_mib", 3}}}};
  const auto job_file = dir / "flood.json";
  std::ofstream(job_file) << job.dump(2);

  auto sub = run_baton({"submit", job_file.string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  auto wait = run_baton({"wait", id, "--socket", sock}, err);
  INFO(d.log());
  INFO(read_text(err));
  REQUIRE(wait.code == 0);
  CHECK(trim(wait.out) == "job " + id + ": completed");

  // About 15 MiB went to stderr; the log kept its newest 1 MiB and two older generations.
  const auto log = dir / "state" / "jobs" / id / "worker.log";
  std::uintmax_t on_disk = 0;
  for (int k = 0; k <= 2; ++k) {
    const auto p = baton::supervisor::log_generation(log, k);
    REQUIRE(fs::exists(p));
    CHECK(fs::file_size(p) <= (1u << 20));
    on_disk += fs::file_size(p);
  }
  CHECK_FALSE(fs::exists(baton::supervisor::log_generation(log, 3)));
  CHECK(on_disk <= 3u * (1u << 20));

  // The last 5 lines, stamped: the time each was written, then the line as the worker or the
  // daemon wrote it.
  auto stamped = run_baton({"logs", id, "--timestamps", "--tail", "5", "--socket", sock}, err);
  REQUIRE(stamped.code == 0);
  const auto with = lines_of(stamped.out);
  REQUIRE(with.size() == 5);
  for (const auto& l : with) CHECK(baton::supervisor::starts_with_log_stamp(l));
  CHECK_THAT(with.back(), Catch::Contains("[baton] job completed"));
  auto plain = run_baton({"logs", id, "--tail", "5", "--socket", sock}, err);
  REQUIRE(plain.code == 0);
  const auto without = lines_of(plain.out);
  REQUIRE(without.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(without[i] == with[i].substr(baton::supervisor::log_stamp_bytes));
  }

  // From the start: what rotation dropped is named, and the rest comes whole, line by line.
  take_err(err);
  auto all = run_baton({"logs", id, "--socket", sock}, err);
  REQUIRE(all.code == 0);
  CHECK_THAT(take_err(err), Catch::Contains("bytes of the log were rotated away"));
  CHECK(all.out.size() <= on_disk);
  CHECK(all.out.size() > on_disk / 2);
  // The 2 MiB line was cut, not held whole.
  CHECK_THAT(all.out, Catch::Contains(baton::supervisor::cut_marker(64 * 1024)));
  CHECK_THAT(all.out, Catch::Contains("flood step 3\n"));
  CHECK_THAT(all.out, Catch::EndsWith(without.back() + "\n"));
  auto follow = run_baton({"logs", id, "--follow", "--socket", sock}, err);
  CHECK(follow.code == 0);
  CHECK(follow.out == all.out);

  d.signal(false);
  CHECK(d.wait(std::chrono::seconds(10)));
  fs::remove_all(dir);
}

}  // namespace worker_log_test
