// A real Prometheus (Debian's `prometheus` package, which scripts/setup.sh installs) scrapes a
// real `baton serve` through its read-only http_listen listener while a leaky Python worker is
// recycled by its soft limit, and Prometheus's own HTTP API must show what a user would plot: the
// worker RSS series rising and dropping at each recycle, and the restarts counted by cause.
// A missing prometheus or curl fails the test (it never skips). Linux only, like all of
// tests/integration but its *_windows_test.cpp files.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

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
namespace prometheus_test {

const fs::path prometheus_exe = "/usr/bin/prometheus";
const fs::path curl_exe = "/usr/bin/curl";

// A port the OS says is free now (Prometheus has no "any port" mode that reports back).
std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

// GET with curl (argv, no shell); the body, or "" when the server does not answer 200.
std::string http_get(const std::string& url, const std::vector<std::string>& query = {}) {
  std::vector<std::string> argv = {curl_exe.string(), "--silent", "--fail", "--max-time", "5",
                                   "--get",           url};
  for (const auto& q : query) {
    argv.push_back("--data-urlencode");
    argv.push_back(q);
  }
  auto r = run_process(argv, {}, {}, std::chrono::seconds(10));
  return r.status.success() ? r.out : std::string();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The values of a query_range answer's only series, oldest first.
std::vector<double> range_values(const std::string& base, const std::string& query, double start,
                                 double end) {
  const auto text = http_get(
      base + "/api/v1/query_range",
      {"query=" + query, "start=" + std::to_string(start), "end=" + std::to_string(end), "step=1"});
  INFO("query_range " << query << " answered: " << text);
  REQUIRE(!text.empty());
  const auto doc = json::parse(text);
  REQUIRE(doc.at("status") == "success");
  const auto& result = doc.at("data").at("result");
  REQUIRE(result.size() == 1);
  std::vector<double> out;
  for (const auto& v : result[0].at("values")) out.push_back(std::stod(v[1].get<std::string>()));
  return out;
}

// Prometheus as a child process of the test, killed (its group) at the end.
class prometheus_process {
 public:
  prometheus_process(const fs::path& dir, std::uint16_t scrape_port) : port_(free_port()) {
    const auto config = dir / "prometheus.yml";
    std::ofstream(config) << "global:\n"
                             "  scrape_interval: 1s\n"
                             "  scrape_timeout: 900ms\n"
                             "scrape_configs:\n"
                             "  - job_name: baton\n"
                             "    static_configs:\n"
                             "      - targets: ['127.0.0.1:"
                          << scrape_port << "']\n";
    baton::os::spawn_options o;
    o.argv = {prometheus_exe.string(), "--config.file=" + config.string(),
              "--storage.tsdb.path=" + (dir / "tsdb").string(),
              "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"};
    o.stderr_log = dir / "prometheus.log";
    auto p = baton::os::spawn(io_, o);
    REQUIRE(p);
    proc_ = std::move(*p);
    proc_->async_read_lines([](const boost::system::error_code&, std::string_view) {});
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!http_get(url() + "/-/ready").empty()) return;
      std::this_thread::sleep_for(100ms);
    }
    FAIL("prometheus did not become ready:\n" << read_text(dir / "prometheus.log"));
  }
  ~prometheus_process() { (void)proc_->signal_group(baton::os::group_signal::kill); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::uint16_t port_;
  boost::asio::io_context io_;
  std::unique_ptr<baton::os::process> proc_;
};

TEST_CASE("a real Prometheus scrapes the sawtooth and the recycles of a leaky job",
          "[integration][prometheus]") {
  INFO("Debian's prometheus and curl packages are needed: run scripts/setup.sh");
  REQUIRE(fs::exists(prometheus_exe));
  REQUIRE(fs::exists(curl_exe));
  const auto dir = fresh_scratch_dir("baton-prometheus-test");
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << R"({"http_listen": "127.0.0.1:0"})";
  daemon_process d(dir, {"--settings", settings.string()});

  // The daemon prints where it serves /metrics; port 0 had it pick a free one.
  std::smatch m;
  const auto log = d.log();
  const std::regex line(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)");
  REQUIRE(std::regex_search(log, m, line));
  const auto metrics_port = static_cast<std::uint16_t>(std::stoi(m[1].str()));
  const auto scrape = http_get("http://127.0.0.1:" + m[1].str() + "/metrics");
  CHECK_THAT(scrape, Catch::Contains("# TYPE baton_daemon_uptime_seconds gauge"));
  // The daemon's own RSS, from /proc/self/status: a real process, some MiB.
  std::smatch rss_line;
  REQUIRE(std::regex_search(scrape, rss_line,
                            std::regex(R"(\nbaton_daemon_resident_memory_bytes (\d+)\n)")));
  const double daemon_rss = std::stod(rss_line[1].str());
  CHECK(daemon_rss > 1.0 * 1048576);
  CHECK(daemon_rss < 256.0 * 1048576);
  // Read-only: without the dashboard token the listener gives no job data (401), let alone
  // anything that changes a job.
  CHECK(http_get("http://127.0.0.1:" + m[1].str() + "/v1/jobs").empty());

  prometheus_process prom(dir, metrics_port);
  const double start = unix_now();

  // Python at about 5 MiB plus 1 MiB a step every 100 ms: a worker reaches the 48 MiB soft
  // limit in about 4.5 s (four scrapes per tooth) and is recycled; 150 steps take three.
  const json doc = {{"name", "leaky"},
                    {"worker",
                     {{"command",
                       {python(), std::string(BATON_SOURCE_DIR) +
                                      "/tests/integration/workers/leaky_worker.py"}}}},
                    {"shard", {{"steps", 1000}}},
                    {"memory", {{"soft_limit_mib", 48}, {"hard_limit_mib", 400}, {"poll_ms", 50}}},
                    {"params", {{"total_steps", 150}, {"leak_mib_per_step", 1}, {"step_ms", 100}}}};
  const auto job = dir / "leaky.json";
  std::ofstream(job) << doc.dump(2);
  const auto err = dir / "client.err";
  auto sub = run_baton({"submit", job.string(), "--socket", d.socket().string()}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  const auto done = d.poll(
      id, [](const json& s) { return s.at("state") == "completed"; }, 60s);
  const int recycles = done.at("exits_by_cause").value("memory_soft", 0);
  INFO("job: " << done.dump());
  REQUIRE(recycles >= 2);
  // The figures a user reads: restarts split by kind, the leak within 10% of the 1 MiB a step
  // the worker holds, and a line in the daemon's own log for every recycle.
  CHECK(done.at("restarts") == json{{"recycle", recycles}, {"failure", 0}, {"user", 0}});
  REQUIRE(done.at("leak_bytes_per_step").is_number());
  CHECK(std::abs(done.at("leak_bytes_per_step").get<double>() / 1048576.0 - 1.0) <= 0.1);
  for (const auto& shard : done.at("shards")) {
    CHECK(shard.at("peak_rss_bytes").get<std::int64_t>() > 0);
  }
  {
    const auto daemon_log = d.log();
    int lines = 0;
    for (auto at = daemon_log.find("recycled: memory_soft"); at != std::string::npos;
         at = daemon_log.find("recycled: memory_soft", at + 1)) {
      ++lines;
    }
    CHECK(lines == recycles);
  }
  std::this_thread::sleep_for(2500ms);  // the last scrapes land
  const double end = unix_now();

  // The sawtooth: the worker series rises within a worker and drops at each recycle.
  const auto rss = range_values(
      prom.url(), "baton_job_worker_resident_memory_bytes{job_id=\"" + id + "\"}", start, end);
  std::string shown;  // appended: GCC 12's -Wrestrict misfires on " " + std::to_string(...)
  for (double v : rss) {
    shown += ' ';
    shown += std::to_string(static_cast<int>(v / 1048576));
  }
  INFO("rss series, MiB at 1 s steps:" << shown);
  int drops = 0, rises = 0;
  for (std::size_t i = 1; i < rss.size(); ++i) {
    if (rss[i] < rss[i - 1] * 0.7) ++drops;
    if (rss[i] > rss[i - 1] * 1.05) ++rises;
  }
  CHECK(drops >= recycles - 1);  // a recycle between two scrapes can hide in one step at most
  CHECK(drops >= 2);
  CHECK(rises >= 2 * drops);
  double peak = 0;
  for (double v : rss) peak = std::max(peak, v);
  CHECK(peak > 30.0 * 1048576);
  CHECK(peak < 400.0 * 1048576);

  // Restarts by cause: the recycles, and no failure.
  const auto recycled = range_values(
      prom.url(), "baton_job_restarts_total{job_id=\"" + id + "\",cause=\"recycle\"}", start, end);
  REQUIRE(!recycled.empty());
  CHECK(recycled.back() == recycles);
  CHECK(recycled.front() < recycled.back());  // it counted up while Prometheus watched
  const auto failed = range_values(
      prom.url(), "baton_job_restarts_total{job_id=\"" + id + "\",cause=\"failure\"}", start, end);
  REQUIRE(!failed.empty());
  CHECK(failed.back() == 0);
  const auto state = range_values(
      prom.url(), "baton_job_state{job_id=\"" + id + "\",state=\"completed\"}", start, end);
  REQUIRE(!state.empty());
  CHECK(state.back() == 1);

  d.signal(false);
  CHECK(d.wait(10s));
}

}  // namespace prometheus_test
