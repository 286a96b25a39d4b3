#include "supervisor/job_record.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace baton::supervisor;

namespace {
job_record sample_record() {
  job_record r;
  r.id = "seed";
  r.name = "seed";
  r.state = job_state::running;
  r.total_steps = 3140;
  r.checkpoint_step = 157;
  r.checkpoint_path = "/state/jobs/seed/checkpoints/ckpt-000000000157.safetensors";
  r.consecutive_failures = 1;
  r.exits_by_cause = {{"memory_soft", 2}, {"crashed", 1}};
  r.metrics = {{"loss", 0.25}, {"accuracy", 0.9375}};
  shard_record s;
  s.index = 1;
  s.attempt = 2;
  s.pid = 4242;
  s.start_step = 157;
  s.end_step = 200;
  s.cause = exit_cause::memory_soft;
  s.detail = "rss 1100 MiB > soft 1024 MiB";
  s.peak_rss_bytes = 1100 << 20;
  s.leak_bytes_per_step = 52428800.5;
  s.rss = {{0, 100, 157}, {100, 200, 160}};
  r.shards.push_back(s);
  shard_record running;
  running.index = 1;
  running.attempt = 3;
  r.shards.push_back(running);
  return r;
}
}  // namespace

TEST_CASE("job record survives a JSON round trip", "[unit][job_record]") {
  const auto r = sample_record();
  const auto j = to_json(r);
  auto back = job_record_from_json(nlohmann::json::parse(j.dump()));
  REQUIRE(back);
  CHECK(to_json(*back) == j);
  CHECK(back->shards[0].cause == exit_cause::memory_soft);
  CHECK_FALSE(back->shards[1].cause.has_value());
}

TEST_CASE("a NaN metric (no loss yet this epoch) survives the round trip", "[unit][job_record]") {
  auto r = sample_record();
  r.metrics["loss"] = std::numeric_limits<double>::quiet_NaN();
  const auto text = to_json(r).dump();
  CHECK(text.find("\"loss\":null") != std::string::npos);
  auto back = job_record_from_json(nlohmann::json::parse(text));
  REQUIRE(back);
  CHECK(std::isnan(back->metrics.at("loss")));
  CHECK(back->metrics.at("accuracy") == 0.9375);
}

TEST_CASE("job record decoding names the bad field", "[unit][job_record]") {
  auto j = to_json(sample_record());
  SECTION("missing field") {
    j.erase("checkpoint_step");
    auto r = job_record_from_json(j);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "job record: checkpoint_step: missing");
  }
  SECTION("wrong type") {
    j["total_steps"] = "many";
    auto r = job_record_from_json(j);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "job record: total_steps: expected an integer");
  }
  SECTION("unknown state") {
    j["state"] = "sleeping";
    auto r = job_record_from_json(j);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "job record: job state: unknown value \"sleeping\"");
  }
  SECTION("bad shard cause") {
    j["shards"][0]["cause"] = "bored";
    auto r = job_record_from_json(j);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "job record: shards[0].cause: exit cause: unknown value \"bored\"");
  }
  SECTION("bad rss triple") {
    j["shards"][0]["rss"][1] = {1, 2};
    auto r = job_record_from_json(j);
    REQUIRE_FALSE(r);
    CHECK(r.error().message ==
          "job record: shards[0].rss: expected [t_ms, bytes, step] integer triples");
  }
  SECTION("not an object") {
    auto r = job_record_from_json(nlohmann::json::array());
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "job record: expected an object");
  }
}

TEST_CASE("state and cause names round trip", "[unit][job_record]") {
  for (auto s : {job_state::queued, job_state::running, job_state::backoff, job_state::completed,
                 job_state::failed, job_state::cancelled, job_state::paused}) {
    auto back = parse_job_state(to_string(s));
    REQUIRE(back);
    CHECK(*back == s);
  }
  for (auto c : {exit_cause::completed, exit_cause::memory_soft, exit_cause::memory_hard,
                 exit_cause::crashed, exit_cause::stalled, exit_cause::stopped,
                 exit_cause::cancelled, exit_cause::spawn_failed}) {
    auto back = parse_exit_cause(to_string(c));
    REQUIRE(back);
    CHECK(*back == c);
  }
  CHECK(is_terminal(job_state::completed));
  CHECK_FALSE(is_terminal(job_state::paused));
  CHECK(counts_as_failure(exit_cause::crashed));
  CHECK_FALSE(counts_as_failure(exit_cause::memory_soft));
  CHECK_FALSE(counts_as_failure(exit_cause::memory_hard));
}

TEST_CASE("rss curve stays bounded and evenly spread", "[unit][job_record]") {
  shard_record s;
  for (std::int64_t i = 0; i < 10000; ++i) {
    add_rss_point(s, {i * 100, (i % 7 == 0) ? 5000 + i : 1000 + i, i});
  }
  CHECK(s.rss.size() <= max_rss_samples);
  CHECK(s.rss.size() >= max_rss_samples / 2);
  CHECK(s.peak_rss_bytes == 5000 + 9996);  // the peak is kept even when its sample is dropped
  CHECK(s.rss.front().t_ms == 0);
  CHECK(s.rss.back().t_ms >= 990000 - 2 * 100 * 64);
  for (std::size_t i = 2; i < s.rss.size(); ++i) {
    const auto a = s.rss[i - 1].t_ms - s.rss[i - 2].t_ms;
    const auto b = s.rss[i].t_ms - s.rss[i - 1].t_ms;
    CHECK(b <= 2 * a);
    CHECK(a <= 2 * b);
  }
}

TEST_CASE("a job's owner survives the round trip and a record from before owners has none",
          "[unit][job_record]") {
  auto r = sample_record();
  r.owner = job_owner{1001, 100, {27, 44}};
  const auto j = to_json(r);
  CHECK(j.at("owner") == nlohmann::json({{"uid", 1001}, {"gid", 100}, {"groups", {27, 44}}}));
  auto back = job_record_from_json(nlohmann::json::parse(j.dump()));
  REQUIRE(back);
  REQUIRE(back->owner);
  CHECK(*back->owner == job_owner{1001, 100, {27, 44}});
  CHECK_FALSE(back->owner->path);

  r.owner->path = "/home/a/.local/bin:/usr/bin";
  auto with_path = job_record_from_json(nlohmann::json::parse(to_json(r).dump()));
  REQUIRE(with_path);
  CHECK(with_path->owner->path == "/home/a/.local/bin:/usr/bin");

  auto old = to_json(sample_record());
  CHECK_FALSE(old.contains("owner"));
  auto loaded = job_record_from_json(old);
  REQUIRE(loaded);
  CHECK_FALSE(loaded->owner);
}

TEST_CASE("a malformed owner is an error naming the field", "[unit][job_record]") {
  auto j = to_json(sample_record());
  for (const auto& bad :
       {nlohmann::json("root"),
        nlohmann::json({{"uid", -1}, {"gid", 0}, {"groups", nlohmann::json::array()}}),
        nlohmann::json({{"uid", 1}, {"gid", 1}}),
        nlohmann::json({{"uid", 1}, {"gid", 1}, {"groups", {"wheel"}}}),
        nlohmann::json({{"uid", 4294967296LL}, {"gid", 1}, {"groups", nlohmann::json::array()}})}) {
    j["owner"] = bad;
    auto r = job_record_from_json(j);
    INFO(bad.dump());
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::StartsWith("job record: owner: expected"));
  }
  j["owner"] = {{"uid", 1}, {"gid", 1}, {"groups", nlohmann::json::array()}, {"path", 7}};
  auto r = job_record_from_json(j);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "job record: owner.path: expected a string");
}
