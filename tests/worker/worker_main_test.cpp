#include "worker/worker_main.h"

#include <catch2/catch.hpp>
#include <map>
#include <vector>

using namespace baton::worker;
using Catch::Matchers::Contains;

namespace {

struct fake_env {
  std::map<std::string, std::string> vars;
  env_lookup lookup() const {
    return [this](const char* name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

baton::result<command_line> parse(std::vector<const char*> args, const fake_env& e = {}) {
  args.insert(args.begin(), "baton-worker");
  return parse_command_line(static_cast<int>(args.size()), args.data(), e.lookup());
}

}  // namespace

TEST_CASE("worker command line: flags", "[unit]") {
  auto r = parse({"--job", "/j/job.json", "--checkpoint-dir", "/c", "--threads", "3"});
  REQUIRE(r);
  REQUIRE(r->options);
  CHECK(r->options->job_file == "/j/job.json");
  CHECK(r->options->checkpoint_dir == "/c");
  CHECK(r->options->threads == 3);
  auto no_threads = parse({"--job=/j", "--checkpoint-dir=/c"});
  REQUIRE(no_threads);
  CHECK_FALSE(no_threads->options->threads);
}

TEST_CASE("worker command line: environment defaults, flags win", "[unit]") {
  fake_env e;
  e.vars = {{"BATON_JOB_FILE", "/env/job.json"}, {"BATON_CHECKPOINT_DIR", "/env/ckpt"}};
  auto from_env = parse({}, e);
  REQUIRE(from_env);
  CHECK(from_env->options->job_file == "/env/job.json");
  CHECK(from_env->options->checkpoint_dir == "/env/ckpt");
  auto mixed = parse({"--job", "/flag/job.json"}, e);
  REQUIRE(mixed);
  CHECK(mixed->options->job_file == "/flag/job.json");
  CHECK(mixed->options->checkpoint_dir == "/env/ckpt");
}

TEST_CASE("worker command line: BATON_START_AHEAD", "[unit]") {
  const auto with = [](const std::string& value) {
    fake_env e;
    e.vars = {{"BATON_START_AHEAD", value}};
    return parse({"--job", "/j", "--checkpoint-dir", "/c"}, e);
  };
  auto unset = parse({"--job", "/j", "--checkpoint-dir", "/c"}, fake_env{});
  REQUIRE(unset);
  CHECK_FALSE(unset->options->start_ahead);
  REQUIRE(with("1"));
  CHECK(with("1")->options->start_ahead);
  REQUIRE(with("0"));
  CHECK_FALSE(with("0")->options->start_ahead);
  REQUIRE_FALSE(with("yes"));
  CHECK_THAT(with("yes").error().message, Contains("BATON_START_AHEAD: expected 1 or 0"));
}

TEST_CASE("worker command line: errors name the flag", "[unit]") {
  const auto error_of = [](std::vector<const char*> args, const fake_env& e = {}) {
    auto r = parse(std::move(args), e);
    REQUIRE_FALSE(r);
    return r.error().message;
  };
  CHECK_THAT(error_of({"--checkpoint-dir", "/c"}),
             Contains("--job is required (or set BATON_JOB_FILE)"));
  CHECK_THAT(error_of({"--job", "/j"}),
             Contains("--checkpoint-dir is required (or set BATON_CHECKPOINT_DIR)"));
  fake_env empty_var;
  empty_var.vars = {{"BATON_JOB_FILE", ""}};
  CHECK_THAT(error_of({"--checkpoint-dir", "/c"}, empty_var), Contains("--job is required"));
  CHECK_THAT(error_of({"--job", "/j", "--checkpoint-dir", "/c", "--threads", "-1"}),
             Contains("--threads"));
  CHECK_THAT(error_of({"--job", "/j", "--checkpoint-dir", "/c", "--threads", "two"}),
             Contains("--threads"));
  CHECK_THAT(error_of({"--job", "/j", "--checkpoint-dir", "/c", "--epochs", "3"}),
             Contains("--epochs"));
  CHECK_THAT(error_of({"--job", "/j", "--checkpoint-dir", "/c", "extra"}), Contains("extra"));
  CHECK_THAT(error_of({"--job"}), Contains("--job"));
  CHECK_THAT(error_of({"--job", "/a", "--job", "/b", "--checkpoint-dir", "/c"}), Contains("--job"));
  for (const char* flag : {"--job", "--checkpoint-dir"}) {
    CHECK_THAT(error_of({flag}), Contains("usage: baton-worker --job FILE"));
  }
}

TEST_CASE("worker command line: help", "[unit]") {
  auto r = parse({"--help"});
  REQUIRE(r);
  CHECK_FALSE(r->options);
  CHECK_THAT(r->help, Contains("--checkpoint-dir") && Contains("BATON_JOB_FILE"));
}
