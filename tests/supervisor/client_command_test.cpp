#include "supervisor/client_command.h"

#include <catch2/catch.hpp>
#include <functional>
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

TEST_CASE("status and list never throw on a null or mistyped field", "[unit][client_command]") {
  // `baton status` once died twice in 95 polls at shard starts: live.loss and
  // leak_bytes_per_step were null ("type must be number, but is null").
  json full = running(160);
  full["soft_limit_mib"] = 64;
  full["hard_limit_mib"] = 400;
  full["peak_rss_bytes"] = 1 << 20;
  full["leak_bytes_per_step"] = 1024.0;
  full["diagnosis"] = "";
  full["queue_position"] = 1;
  full["containment"] = "cgroup";
  full["live"]["metrics"] = {{"accuracy", 0.9}};
  full["shards"] = {{{"index", 0},
                     {"attempt", 0},
                     {"pid", 77},
                     {"start_step", 0},
                     {"end_step", 8},
                     {"cause", "memory_soft"},
                     {"peak_rss_bytes", 1 << 20},
                     {"leak_bytes_per_step", 512.0},
                     {"detail", ""}}};
  full["exits_by_cause"] = {{"memory_soft", 1}};
  REQUIRE_NOTHROW(format_job_status(full));
  const json odd_values[] = {nullptr, "text", json::array(), json::object(), -1, 1.5, true};
  const auto each_field = [&](const std::function<json&(json&)>& at, const json& fields) {
    for (const auto& [key, value] : fields.items()) {
      for (const auto& odd : odd_values) {
        json s = full;
        at(s)[key] = odd;
        INFO(key << " = " << odd.dump());
        CHECK_NOTHROW(format_job_status(s));
        CHECK_NOTHROW(format_job_list(json{{"jobs", {s}}}));
      }
    }
  };
  each_field([](json& s) -> json& { return s; }, full);
  each_field([](json& s) -> json& { return s["live"]; }, full["live"]);
  each_field([](json& s) -> json& { return s["shards"][0]; }, full["shards"][0]);
  CHECK_NOTHROW(format_job_status(json::object()));
  CHECK_NOTHROW(format_job_list(json{{"jobs", nullptr}}));
  CHECK_NOTHROW(format_job_list(json{{"jobs", {nullptr, 3}}}));

  // A loss not reported yet is left out, not shown as 0.
  json fresh = running(160);
  fresh["live"]["loss"] = nullptr;
  CHECK_THAT(format_job_status(fresh), Catch::Contains("epoch 1\n") && !Catch::Contains("loss"));
}
