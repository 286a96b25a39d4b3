#include "supervisor/client_command.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using baton::supervisor::format_job_list;
using baton::supervisor::format_job_status;
using json = nlohmann::json;

namespace {

// What GET /v1/jobs/{id} answers for a running command worker's job.
json running(std::int64_t total_steps) {
  return {{"id", "own-1"},
          {"name", "own"},
          {"state", "running"},
          {"step", 40},
          {"total_steps", total_steps},
          {"checkpoint_step", 35},
          {"checkpoint_path", "/s/jobs/own-1/checkpoints/ckpt-000000000035.safetensors"},
          {"live", {{"pid", 77}, {"epoch", 0}, {"loss", 0.5}, {"rss_bytes", 100 << 20}}},
          {"shards", json::array()},
          {"exits_by_cause", json::object()}};
}

}  // namespace

TEST_CASE("status shows the worker's total once known, and no total before",
          "[unit][client_command]") {
  // Before the first progress line the spec gave no total (a job without data or training).
  const auto unknown = format_job_status(running(0));
  CHECK_THAT(unknown, Catch::Contains("  step 40, epoch 1, loss 0.5000\n"));
  CHECK_THAT(unknown, !Catch::Contains("40/0") && !Catch::Contains("%)"));
  const auto known = format_job_status(running(160));
  CHECK_THAT(known, Catch::Contains("  step 40/160 (25.0%), epoch 1, loss 0.5000\n"));

  const json list = {{"jobs", {running(0), running(160)}}};
  const auto table = format_job_list(list);
  CHECK_THAT(table, Catch::Contains(" 40 ") && Catch::Contains(" 40/160 "));
  CHECK_THAT(table, !Catch::Contains("40/0"));
}
