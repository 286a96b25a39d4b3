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

TEST_CASE("status and list colour state names only when asked", "[unit][client_command]") {
  json s = running(160);
  json failed = running(160);
  failed["state"] = "failed";
  failed["shards"] = {{{"index", 0}, {"pid", 9}, {"cause", "crashed"}, {"detail", "exit code 2"}}};
  CHECK_THAT(format_job_status(s, true), Catch::Contains("own-1 (own): \x1b[32mrunning\x1b[0m\n"));
  CHECK_THAT(format_job_status(failed, true), Catch::Contains("\x1b[31mcrashed\x1b[0m      "));
  CHECK(format_job_status(s, false).find('\x1b') == std::string::npos);
  CHECK(format_job_status(failed, false).find('\x1b') == std::string::npos);
  CHECK_THAT(format_job_status(failed, false), Catch::Contains(" crashed        "));
  const json list = {{"jobs", {s, failed}}};
  const auto painted = format_job_list(list, true);
  CHECK_THAT(painted, Catch::Contains("\x1b[32mrunning\x1b[0m   ") &&
                          Catch::Contains("\x1b[31mfailed\x1b[0m    "));
  // The same columns either way: only the escape codes differ.
  std::string plain = painted;
  for (const std::string code : {"\x1b[32m", "\x1b[31m", "\x1b[0m"}) {
    for (auto at = plain.find(code); at != std::string::npos; at = plain.find(code))
      plain.erase(at, code.size());
  }
  CHECK(plain == format_job_list(list, false));
}

TEST_CASE("a crashed job's status shows the log's path and its last lines under the diagnosis",
          "[unit][client_command]") {
  json s = running(160);
  s["state"] = "failed";
  s["diagnosis"] = "crashed 5 times without progress";
  s["log_path"] = "/s/jobs/own-1/worker.log";
  s["log_tail"] = {
      "python3: can't open file '/nonexistent.py': [Errno 2] No such file or directory"};
  const auto text = format_job_status(s);
  CHECK_THAT(text, Catch::StartsWith("job own-1 (own): failed (crashed 5 times without progress)\n"
                                     "  last lines of /s/jobs/own-1/worker.log:\n"
                                     "    python3: can't open file '/nonexistent.py': [Errno 2] No "
                                     "such file or directory\n"));
  s["log_tail"] = nullptr;
  CHECK_THAT(format_job_status(s), !Catch::Contains("last lines"));
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
  full["leak_ci95_bytes_per_step"] = 64.0;
  full["leak_workers"] = 1;
  full["leak_note"] = nullptr;
  full["restarts"] = {{"recycle", 1}, {"failure", 0}, {"user", 0}};
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

TEST_CASE(
    "status shows the job's leak with its interval, or why there is none, and restarts by kind",
    "[unit][client_command]") {
  json s = running(160);
  s["peak_rss_bytes"] = 300 << 20;
  s["leak_bytes_per_step"] = 1.02 * 1048576;
  s["leak_ci95_bytes_per_step"] = 0.03 * 1048576;
  s["leak_workers"] = 3;
  s["restarts"] = {{"recycle", 2}, {"failure", 1}, {"user", 0}};
  s["shards"] = {{{"index", 0},
                  {"attempt", 0},
                  {"pid", 77},
                  {"start_step", 0},
                  {"end_step", 8},
                  {"cause", "memory_soft"},
                  {"peak_rss_bytes", 1020},
                  {"leak_bytes_per_step", 0.25 * 1048576},
                  {"leak_ci95_bytes_per_step", 0.01 * 1048576},
                  {"detail", ""}}};
  const auto text = format_job_status(s);
  CHECK_THAT(text, Catch::Contains(
                       "  leak 1.02 +- 0.03 MiB/step (95% interval, steady part of 3 workers)\n"));
  CHECK_THAT(text, Catch::Contains("  restarts: 2 recycles, 1 failure, 0 user stops\n"));
  CHECK_THAT(text, Catch::Contains("peak MiB    leak MiB/step"));
  CHECK_THAT(text, Catch::Contains(" 0.0     0.25 +- 0.01 "));  // one unit: no "1020 B"
  s["leak_bytes_per_step"] = nullptr;
  s["leak_note"] = "not enough samples (2 in the steady part, at least 6 over 3 steps needed)";
  CHECK_THAT(format_job_status(s),
             Catch::Contains("  leak: not enough samples (2 in the steady part"));
}

TEST_CASE("a sparkline spans the values' range and keeps every peak", "[unit][client_command]") {
  using baton::supervisor::sparkline;
  CHECK(sparkline({}, 10).empty());
  CHECK(sparkline({1, 2, 3, 4, 5, 6, 7, 8}, 8) ==
        "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588");
  CHECK(sparkline({5, 5, 5}, 10) == "\u2581\u2581\u2581");  // flat: the lowest bar, no division
  // 100 values in 10 columns: the one spike lands in its column at full height.
  std::vector<double> v(100, 1.0);
  v[57] = 9.0;
  CHECK(sparkline(v, 10) == "\u2581\u2581\u2581\u2581\u2581\u2588\u2581\u2581\u2581\u2581");
  CHECK(sparkline({1, std::nan(""), 2}, 5) == "\u2581\u2588");  // a NaN is not a bar
}

TEST_CASE("status draws each worker's RSS and the loss from the history, with elapsed and ETA",
          "[unit][client_command]") {
  using baton::supervisor::format_job_history;
  json s = running(200);
  s["created_ms"] = 1000000;
  json h = {{"rss", json::array()}, {"progress", json::array()}, {"events", json::array()}};
  for (int w = 0; w < 2; ++w) {
    for (int i = 0; i < 10; ++i) {
      h["rss"].push_back({{"shard", w}, {"pid", 100 + w}, {"bytes", (10 + i) << 20}});
    }
  }
  for (int i = 0; i <= 10; ++i) {
    h["progress"].push_back(
        {{"t_ms", 1000000 + i * 1000}, {"step", i * 10}, {"loss", 1.0 / (i + 1)}});
  }
  h["progress"].push_back({{"t_ms", 1012000}, {"step", 110}, {"loss", nullptr}});
  const auto text = format_job_history(s, h, 1062000);
  // 110 steps in 12 s: 90 to go take about 9.8 s.
  CHECK_THAT(text, Catch::Contains("  elapsed 1m02s, ETA 9.8s\n"));
  CHECK_THAT(text, Catch::Contains("rss  shard 0    pid 100"));
  CHECK_THAT(text, Catch::Contains("rss  shard 1    pid 101"));
  CHECK_THAT(text, Catch::Contains(
                       "\u2581\u2582\u2583\u2583\u2584\u2585\u2586\u2586\u2587\u2588 peak 19 MiB"));
  CHECK_THAT(text, Catch::Contains("now 0.0909"));
  CHECK_NOTHROW(format_job_history(json::object(), json::object(), 0));
  CHECK_NOTHROW(format_job_history(s, json{{"rss", {nullptr, 1}}, {"progress", "x"}}, 0));
}

TEST_CASE("logs --tail keeps the last lines", "[unit][client_command]") {
  using baton::supervisor::last_lines;
  CHECK(last_lines("a\nb\nc\n", 2) == "b\nc\n");
  CHECK(last_lines("a\nb\nc", 2) == "b\nc");
  CHECK(last_lines("a\nb\n", 5) == "a\nb\n");
  CHECK(last_lines("a\nb\n", 0).empty());
  CHECK(last_lines("", 3).empty());
}

TEST_CASE("prune ages read as people write them", "[unit][client_command]") {
  using baton::supervisor::parse_age;
  CHECK(*parse_age("90s") == 90'000);
  CHECK(*parse_age("30m") == 1'800'000);
  CHECK(*parse_age("12h") == 43'200'000);
  CHECK(*parse_age("7d") == 604'800'000);
  CHECK(*parse_age("2w") == 1'209'600'000);
  CHECK(parse_age("7").error().message ==
        "--older-than '7': expected a number and a unit: 90s, 30m, 12h, 7d or 2w");
  CHECK(parse_age("7y").error().message == "--older-than '7y': unknown unit; use s, m, h, d or w");
  CHECK_FALSE(parse_age("-1d"));
  CHECK_FALSE(parse_age("d"));
  CHECK_FALSE(parse_age("99999999999999999w"));
}
