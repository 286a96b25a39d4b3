#include "supervisor/cli.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "os/env.h"
#include "protocol/job_spec.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;

using baton::test::baton_cli;

namespace {

fs::path scratch_dir(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-cli-test-" + name);
}

const std::string seed = std::string(BATON_SOURCE_DIR) + "/configs/seed.json";

}  // namespace

TEST_CASE("validate prints a good config with every default filled", "[unit][cli]") {
  const auto r = baton_cli({"validate", seed});
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.err.empty());
  const auto printed = nlohmann::json::parse(r.out);
  auto spec = baton::protocol::load_job_spec(baton::os::env::default_env(), seed);
  REQUIRE(spec);
  CHECK(printed == baton::protocol::to_json(*spec));
  CHECK(printed["worker"]["stall_timeout_ms"] == 120000);  // a default seed.json leaves out
}

TEST_CASE("validate prints a command worker's job with params and without trainer sections",
          "[unit][cli]") {
  const auto file = std::string(BATON_SOURCE_DIR) + "/tests/data/jobs/command-params.json";
  const auto r = baton_cli({"validate", file});
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.err.empty());
  const auto printed = nlohmann::json::parse(r.out);
  CHECK(printed["params"] == nlohmann::json::parse(R"({"lr": 0.003, "layers": [64, 64],
                                                       "dataset": "mnist", "augment": true})"));
  CHECK_FALSE(printed.contains("data"));
  CHECK_FALSE(printed.contains("model"));
  CHECK_FALSE(printed.contains("training"));
  CHECK(printed["restart"]["max_failures"] == 5);  // baton's own sections get their defaults
}

TEST_CASE("validate lists every error of a bad config and exits 2", "[unit][cli]") {
  const auto dir = scratch_dir("bad");
  const auto file = (dir / "bad.json").string();
  REQUIRE(baton::os::write_file_atomic(baton::os::env::default_env(), file, R"({
    "name": "bad", "trainig": {},
    "data": {"type": "synthetic"},
    "model": {"layers": [{"units": 1, "activation": "sigmoid"}]},
    "training": {"batch_size": -3}
  })"));
  const auto r = baton_cli({"validate", file});
  CHECK(r.code == baton::supervisor::exit_invalid);
  CHECK(r.out.empty());
  CHECK(r.err == file + ": trainig: unknown key; did you mean \"training\"?\n" + file +
                     ": training.batch_size: expected a positive integer, got -3\n");
  fs::remove_all(dir);
}

TEST_CASE("validate reports missing data files and unreadable configs", "[unit][cli]") {
  const auto dir = scratch_dir("files");
  const auto file = (dir / "job.json").string();
  REQUIRE(baton::os::write_file_atomic(baton::os::env::default_env(), file, R"({
    "name": "job", "data": {"type": "csv", "path": "missing.csv", "label_column": "y"},
    "model": {"layers": [{"units": 1, "activation": "sigmoid"}]}
  })"));
  auto r = baton_cli({"validate", file});
  CHECK(r.code == baton::supervisor::exit_invalid);
  CHECK(r.err == file + ": data.path: file not found: " + (dir / "missing.csv").string() + "\n");

  r = baton_cli({"validate", (dir / "absent.json").string()});
  CHECK(r.code == baton::supervisor::exit_invalid);
  CHECK(r.err.find((dir / "absent.json").string()) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("bad command lines exit 64, help exits 0", "[unit][cli]") {
  CHECK(baton_cli({}).code == baton::supervisor::exit_usage);
  CHECK(baton_cli({"validate"}).code == baton::supervisor::exit_usage);
  CHECK(baton_cli({"frobnicate"}).code == baton::supervisor::exit_usage);
  CHECK(baton_cli({"validate", seed, "extra"}).code == baton::supervisor::exit_usage);

  auto help = baton_cli({"--help"});
  CHECK(help.code == baton::supervisor::exit_ok);
  CHECK(help.out.find("validate") != std::string::npos);
  help = baton_cli({"validate", "--help"});
  CHECK(help.code == baton::supervisor::exit_ok);
  CHECK(help.out.find("CONFIG") != std::string::npos);
  const auto version = baton_cli({"--version"});
  CHECK(version.code == baton::supervisor::exit_ok);
  // The version and the commit it was built from (12 hex digits, maybe "-dirty"), or "unknown"
  // outside a git checkout.
  CHECK_THAT(
      version.out,
      Catch::Matches("baton \\d+\\.\\d+\\.\\d+ \\(commit ([0-9a-f]{12}(-dirty)?|unknown)\\)\\n"));
}

TEST_CASE("the --color flag is top-level, taken before or after the verb", "[unit][cli]") {
  // An invalid id fails before any daemon is asked: its error line shows the prefix.
  auto r = baton_cli({"status", "..bad", "--color=always"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK(r.err == "\x1b[1;31mbaton:\x1b[0m invalid job id '..bad'\n");
  r = baton_cli({"--color=never", "status", "..bad"});
  CHECK(r.err == "baton: invalid job id '..bad'\n");
  // The streams of an in-process run are no terminal: auto leaves them plain.
  r = baton_cli({"status", "..bad"});
  CHECK(r.err == "baton: invalid job id '..bad'\n");
  r = baton_cli({"--color=sometimes", "list"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, Catch::Contains("--color"));
  r = baton_cli({"list", "--colr=always"});
  CHECK_THAT(r.err, Catch::Contains("did you mean '--color'?"));
}

TEST_CASE("a mistyped command or option gets a did-you-mean", "[unit][cli]") {
  auto r = baton_cli({"stauts", "x"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, Catch::Contains("'stauts' is not a baton command; did you mean 'status'?"));
  r = baton_cli({"frobnicate"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, Catch::Contains("'frobnicate' is not a baton command; expected one of "));
  CHECK_THAT(r.err, Catch::Contains("validate"));
  r = baton_cli({"logs", "job-1", "--folow"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, Catch::Contains("'--folow' is not an option of `logs`; did you mean "
                                    "'--follow'?"));
  r = baton_cli({"validate", seed, "--jsno=1"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, Catch::Contains("'--jsno' is not an option of `validate`"));
  // A real error that is no typo keeps CLI11's own words.
  r = baton_cli({"validate"});
  CHECK(r.code == baton::supervisor::exit_usage);
  CHECK_THAT(r.err, !Catch::Contains("did you mean"));
}
