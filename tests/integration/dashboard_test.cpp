// The dashboard in a real browser: Debian's chromium, headless, driven by playwright-core (npm,
// web/package-lock.json) through tests/integration/dashboard/check_dashboard.mjs, opens the URL a
// real `baton serve` printed while a leaky Python worker is recycled by its soft limit. The page
// must load with no console error, draw RSS points from every worker (at least two) with both
// limit lines, draw loss points, and grow while the job runs; the same page with a wrong token
// must get no data. A screenshot is left in the build tree (dashboard.png beside the test binary's
// working directory). Missing node, chromium or playwright-core fails the test: scripts/setup.sh
// installs them. Linux only, like all of tests/integration but its *_windows_test.cpp files.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "support/daemon_process.h"
#include "support/run_process.h"
#include "support/test_paths.h"

using namespace baton::test;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

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

}  // namespace

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

  // Python at about 10 MiB plus 2 MiB a step every 100 ms: recycled at the 64 MiB soft limit
  // every ~2.5 s, about 25 s for the job: the page sees several workers while it still runs.
  const json doc = {{"name", "leaky"},
                    {"worker",
                     {{"command",
                       {python(), std::string(BATON_SOURCE_DIR) +
                                      "/tests/integration/workers/leaky_worker.py"}}}},
                    {"shard", {{"steps", 1000}}},
                    {"memory", {{"soft_limit_mib", 64}, {"hard_limit_mib", 160}, {"poll_ms", 50}}},
                    {"params", {{"total_steps", 240}, {"leak_mib_per_step", 2}, {"step_ms", 100}}}};
  const auto job = dir / "leaky.json";
  std::ofstream(job) << doc.dump(2);
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
  const auto out = dir / "seen.json";
  const std::string bad_url = base + "/?token=" + std::string(64, '0');
  const auto r = run_process(
      {node_exe.string(),
       std::string(BATON_SOURCE_DIR) + "/tests/integration/dashboard/check_dashboard.mjs", url,
       bad_url, shot.string(), (dir / "chromium-profile").string(), out.string(), queued_id},
      {{"BATON_WEB_DIR", web_dir.string()}}, dir / "node.err", 60s);
  INFO("node stderr: " << read_text(dir / "node.err"));
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.status.success());
  const auto seen = json::parse(read_text(out));
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

  // The queued job: no sample, no loss, no worker; shown as such, with no error.
  CHECK(seen.at("emptyConsoleErrors").empty());
  CHECK(seen.at("empty").at("job") == queued_id);
  CHECK(seen.at("empty").at("rssSeries").empty());
  CHECK(seen.at("empty").at("error").is_null());
  CHECK(seen.at("emptyShown").at("rssEmpty") == true);
  CHECK(seen.at("emptyShown").at("lossEmpty") == true);
  CHECK_THAT(seen.at("emptyShown").at("title").get<std::string>(), Catch::Contains("queued"));

  // A wrong token: the page loads (it holds no data) but gets none, and says why.
  const auto& bad = seen.at("badToken");
  CHECK(bad.at("rssSeries").empty());
  CHECK(bad.at("lossPoints") == 0);
  CHECK(bad.at("job").is_null());
  CHECK_THAT(seen.at("badTokenText").get<std::string>(), Catch::Contains("wrong dashboard token"));
}
