// The dashboard in a real browser: Debian's chromium, headless, driven by playwright-core (npm,
// web/package-lock.json) through tests/integration/dashboard/check_dashboard.mjs, opens the URL a
// real `baton serve` printed while a leaky Python worker is recycled by its soft limit. The page
// must load with no console error, draw RSS points from every worker (at least two) with both
// limit lines, draw loss points, and grow while the job runs; the same page with a wrong token
// must get no data. A screenshot is left in the build tree (dashboard.png beside the test binary's
// working directory). Missing node, chromium or playwright-core fails the test: scripts/setup.sh
// installs them. Linux only, like all of tests/integration but its *_windows_test.cpp files.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>

#include "os/process.h"
#include "support/daemon_process.h"
#include "support/run_process.h"
#include "support/test_paths.h"

using namespace baton::test;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace dashboard_test {

const fs::path node_exe = "/usr/bin/node";
const fs::path chromium_exe = "/usr/bin/chromium";
const fs::path web_dir = fs::path(BATON_SOURCE_DIR) / "web";

int worker_series_with_points(const json& summary) {
  int n = 0;
  for (const auto& s : summary.at("rssSeries")) {
    if (s.at("label").get<std::string>().rfind("worker", 0) == 0 && s.at("points") > 0) ++n;
  }
  return n;
}

int points_of(const json& summary, const std::string& label) {
  for (const auto& s : summary.at("rssSeries")) {
    if (s.at("label") == label) return s.at("points");
  }
  return 0;
}

int all_points(const json& summary) {
  int n = summary.at("lossPoints");
  for (const auto& s : summary.at("rssSeries")) n += s.at("points").get<int>();
  return n;
}

// Python at about 10 MiB plus 2 MiB a step every 100 ms: recycled at the 64 MiB soft limit
// every ~2.5 s, about 25 s for the job: the page sees several workers while it still runs.
json leaky_job() {
  return {{"name", "leaky"},
          {"worker",
           {{"command",
             {python(),
              std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/leaky_worker.py"}}}},
          {"shard", {{"steps", 1000}}},
          {"memory", {{"soft_limit_mib", 64}, {"hard_limit_mib", 160}, {"poll_ms", 50}}},
          {"params", {{"total_steps", 240}, {"leak_mib_per_step", 2}, {"step_ms", 100}}}};
}

// Runs check_dashboard.mjs at `url` (and at the same listener with a wrong token) and returns
// what the page showed.
json look_at(const std::string& base, const std::string& url, const fs::path& dir,
             const fs::path& shot, const std::string& empty_job = {}) {
  const std::string bad_url = base + "/?token=" + std::string(64, '0');
  const auto out = dir / "seen.json";
  std::vector<std::string> argv = {
      node_exe.string(),
      std::string(BATON_SOURCE_DIR) + "/tests/integration/dashboard/check_dashboard.mjs",
      url,
      bad_url,
      shot.string(),
      (dir / "chromium-profile").string(),
      out.string()};
  if (!empty_job.empty()) argv.push_back(empty_job);
  const auto r = run_process(argv, {{"BATON_WEB_DIR", web_dir.string()}}, dir / "node.err", 60s);
  INFO("node stderr: " << read_text(dir / "node.err"));
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.status.success());
  return json::parse(read_text(out));
}

// What every look at a running leaky job must show, whoever serves the page.
void check_live_job(const json& seen, const std::string& id, const fs::path& shot) {
  INFO("what the page showed: " << seen.dump(1));
  INFO("screenshot: " << shot.string());
  CHECK(seen.at("consoleErrors").empty());
  CHECK(seen.at("pageErrors").empty());
  CHECK_FALSE(seen.contains("waitError"));
  const auto& first = seen.at("first");
  const auto& second = seen.at("second");
  CHECK(first.at("job") == id);
  CHECK(worker_series_with_points(first) >= 2);
  CHECK(points_of(first, "soft limit") > 0);
  CHECK(points_of(first, "hard limit") > 0);
  CHECK(first.at("lossPoints") > 0);
  CHECK(first.at("boundaries") >= 1);  // a recycle, drawn with its cause
  // Live: more points at the second look, 2.5 s later, while the job still ran.
  CHECK(all_points(second) > all_points(first));
  CHECK(second.at("cursor") > first.at("cursor"));
  CHECK(fs::file_size(shot) > 10000);

  // Every worker the job had at each look has points (the newest may not have been sampled yet).
  for (const auto* look : {&first, &second}) {
    CHECK(worker_series_with_points(*look) >= look->at("workers").get<int>() - 1);
  }

  // A wrong token: the page loads (it holds no data) but gets none, and says why.
  const auto& bad = seen.at("badToken");
  CHECK(bad.at("rssSeries").empty());
  CHECK(bad.at("lossPoints") == 0);
  CHECK(bad.at("job").is_null());
  CHECK_THAT(seen.at("badTokenText").get<std::string>(), Catch::Contains("wrong dashboard token"));
}

TEST_CASE("the dashboard in headless chromium draws a leaky job's sawtooth, live",
          "[integration][dashboard]") {
  INFO("node, chromium and web/node_modules (playwright-core) are needed: run scripts/setup.sh");
  REQUIRE(fs::exists(node_exe));
  REQUIRE(fs::exists(chromium_exe));
  REQUIRE(fs::exists(web_dir / "node_modules" / "playwright-core" / "package.json"));
  const auto dir = fresh_scratch_dir("baton-dashboard-test");
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << R"({"http_listen": "127.0.0.1:0"})";
  daemon_process d(dir, {"--settings", settings.string()});

  std::smatch m;
  const auto log = d.log();
  REQUIRE(std::regex_search(
      log, m, std::regex(R"(dashboard on (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]{64}))")));
  const std::string base = m[1].str();
  const std::string token = m[2].str();
  const std::string url = base + "/?token=" + token;
  // The daemon's user finds the same URL again in the state dir, in a file only it can read.
  CHECK(read_text(dir / "state" / "dashboard-url") == url + "\n");
  // `baton dashboard` asks the daemon for the same URL through the control socket.
  const auto asked = run_baton({"dashboard", "--socket", d.socket().string()}, dir / "dash.err");
  CHECK(asked.code == 0);
  CHECK(asked.out == url + "\n");
  CHECK((fs::status(dir / "state" / "dashboard-url").permissions() & fs::perms::group_read) ==
        fs::perms::none);

  const auto job = dir / "leaky.json";
  std::ofstream(job) << leaky_job().dump(2);
  auto sub = run_baton({"submit", job.string(), "--socket", d.socket().string()}, dir / "sub.err");
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  // A second job waits in the queue (max_workers 1): nothing to draw yet, and the page must say
  // so without an error.
  auto queued =
      run_baton({"submit", job.string(), "--socket", d.socket().string()}, dir / "sub2.err");
  REQUIRE(queued.code == 0);
  const auto queued_id = trim(queued.out);

  const auto shot = fs::current_path() / "dashboard.png";
  const auto seen = look_at(base, url, dir, shot, queued_id);
  check_live_job(seen, id, shot);

  // The queued job: no sample, no loss, no worker; shown as such, with no error.
  CHECK(seen.at("emptyConsoleErrors").empty());
  CHECK(seen.at("empty").at("job") == queued_id);
  CHECK(seen.at("empty").at("rssSeries").empty());
  CHECK(seen.at("empty").at("error").is_null());
  CHECK(seen.at("emptyShown").at("rssEmpty") == true);
  CHECK(seen.at("emptyShown").at("lossEmpty") == true);
  CHECK_THAT(seen.at("emptyShown").at("title").get<std::string>(), Catch::Contains("queued"));
}

TEST_CASE("baton run --dashboard serves the same page for a foreground run, live",
          "[integration][dashboard]") {
  INFO("node, chromium and web/node_modules (playwright-core) are needed: run scripts/setup.sh");
  REQUIRE(fs::exists(node_exe));
  REQUIRE(fs::exists(chromium_exe));
  REQUIRE(fs::exists(web_dir / "node_modules" / "playwright-core" / "package.json"));
  const auto dir = fresh_scratch_dir("baton-run-dashboard-test");
  const auto job = dir / "leaky.json";
  std::ofstream(job) << leaky_job().dump(2);

  asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {BATON_EXE, "run", job.string(), "--state-dir", (dir / "state").string(), "--dashboard"};
  o.stderr_log = dir / "run.err";
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  std::string out;
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (!ec) out += std::string(line) + "\n";
  });
  std::optional<baton::os::exit_status> ended;
  (*p)->async_wait(
      [&](const boost::system::error_code&, baton::os::exit_status st) { ended = st; });

  // The URL comes on stderr before the first worker starts.
  std::smatch m;
  const std::regex printed(R"(dashboard on (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]{64}))");
  std::string err;
  for (int i = 0; i < 200 && !std::regex_search(err, m, printed) && !ended; ++i) {
    io.run_for(50ms);
    err = read_text(dir / "run.err");
  }
  INFO("baton run stderr: " << err);
  REQUIRE(std::regex_search(err, m, printed));
  const std::string base = m[1].str();
  const std::string url = base + "/?token=" + m[2].str();

  const auto shot = fs::current_path() / "run-dashboard.png";
  const auto seen = look_at(base, url, dir, shot);
  check_live_job(seen, "leaky", shot);

  // The run goes on to the end of its job, and its history stays in the job's folder.
  for (int i = 0; i < 1200 && !ended; ++i) io.run_for(50ms);
  INFO("baton run stdout: " << out);
  REQUIRE(ended);
  CHECK(ended->how == baton::os::exit_status::kind::exited);
  CHECK(ended->code == 0);
  CHECK(fs::file_size(dir / "state" / "jobs" / "leaky" / "history.jsonl") > 0);
}

}  // namespace dashboard_test
