// What the daemon itself costs while it works (issue 13's goals: its own RSS under 16 MB, its CPU
// under 1%): a real `baton serve` runs 8 leaky Python workers at once (progress 10 times a
// second each by default, RSS sampled every 250 ms, a recycle at the soft limit every ~150 steps)
// while a dashboard is open. The dashboard is replayed, not a real chromium: the page's exact
// request pattern at its rate, over one kept-alive connection with the Bearer token as the
// browser sends it: the page and its four files once, then every second the job list, the
// chosen job's status, its history from the `since` cursor and its log from the last offset
// (web/dashboard.js, poll()). The daemon's CPU is utime+stime of /proc/<pid>/stat (its own, not
// its workers') over wall time, per 5 s window and over the whole run; its RSS is VmRSS of
// /proc/<pid>/status. Prints the CPU model, medians and peaks, and PASS/FAIL against the goals;
// never exits non-zero on a figure (shared machines are noisy). `--no-dashboard` leaves the page
// closed, to tell its share from the workers'. `--quick`: 2 workers for ~4 s, a ctest smoke run.
// `--step-ms` sets the workers' step time (100: 10 progress reports a second each).
//   daemon_overhead_bench [--quick] [--seconds N] [--workers N] [--step-ms N] [--no-dashboard]
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_figures.h"
#include "os/process.h"

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using namespace std::chrono_literals;
using baton::bench::cpu_model;
using baton::bench::die;
using baton::bench::median;

const char* const baton::bench::bench_name = "daemon_overhead_bench";

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// utime + stime of a process, in seconds (fields 14 and 15 of /proc/<pid>/stat, after the comm).
double cpu_seconds(long pid) {
  const auto text = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  if (close == std::string::npos) die("cannot read /proc/" + std::to_string(pid) + "/stat");
  std::istringstream in(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// VmRSS of /proc/<pid>/status, in bytes.
double rss_bytes(long pid) {
  const auto text = read_text("/proc/" + std::to_string(pid) + "/status");
  const auto at = text.find("VmRSS:");
  if (at == std::string::npos) die("no VmRSS for pid " + std::to_string(pid));
  return std::stod(text.substr(at + 6)) * 1024.0;
}

// One kept-alive HTTP/1.1 connection to the dashboard, as the browser holds it.
class dashboard_client {
 public:
  dashboard_client(std::uint16_t port, std::string token) : socket_(io_), token_(std::move(token)) {
    socket_.connect({asio::ip::address_v4::loopback(), port});
  }
  // The body of a 200 answer; dies on anything else (the bench would measure nothing).
  std::string get(const std::string& target) {
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + token_);
    req.keep_alive(true);
    http::write(socket_, req);
    http::response<http::string_body> res;
    http::read(socket_, buffer_, res);
    if (res.result_int() != 200) {
      die("GET " + target + ": " + std::to_string(res.result_int()) + " " + res.body());
    }
    ++requests_;
    return std::move(res.body());
  }
  std::size_t requests() const { return requests_; }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::string token_;
  std::size_t requests_ = 0;
};

// The page's state for its chosen job: what it asks with next.
struct page_state {
  std::string job;
  std::int64_t cursor = 0;
  std::uint64_t log_offset = 0;
};

// One round of web/dashboard.js's poll(): the list, then the chosen job's status, history, log.
void poll_like_the_page(dashboard_client& c, page_state& p) {
  const auto list = json::parse(c.get("/v1/jobs")).at("jobs");
  if (p.job.empty()) {
    for (const auto& j : list) {
      if (j.at("state") == "running") p.job = j.at("id").get<std::string>();
    }
    if (p.job.empty()) return;
  }
  c.get("/v1/jobs/" + p.job);
  const auto h =
      json::parse(c.get("/v1/jobs/" + p.job + "/history?since=" + std::to_string(p.cursor)));
  p.cursor = h.at("next").get<std::int64_t>();
  const auto log =
      json::parse(c.get("/v1/jobs/" + p.job + "/logs?offset=" + std::to_string(p.log_offset)));
  p.log_offset = log.at("next_offset").get<std::uint64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int seconds = 60;
  int workers = 8;
  bool dashboard = true;
  int step_ms = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
      seconds = 4;
      workers = 2;
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atoi(argv[++i]);
    } else if (a == "--step-ms" && i + 1 < argc) {
      step_ms = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--no-dashboard") {
      dashboard = false;
    } else if (a == "--workers" && i + 1 < argc) {
      workers = std::atoi(argv[++i]);
    } else {
      die("usage: daemon_overhead_bench [--quick] [--seconds N] [--workers N] [--step-ms N] "
          "[--no-dashboard]");
    }
  }
  const auto dir = fs::temp_directory_path() / ("baton-overhead-bench-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "settings.json") << json{
      {"http_listen", "127.0.0.1:0"},
      {"max_workers", workers},
      {"log_level", "warning"}}.dump();

  asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {BATON_EXE,     "serve",
            "--state-dir", (dir / "state").string(),
            "--socket",    (dir / "s.sock").string(),
            "--settings",  (dir / "settings.json").string()};
  o.stderr_log = dir / "daemon.log";
  auto daemon = baton::os::spawn(io, o);
  if (!daemon) die("cannot start baton serve: " + daemon.error().message);
  const long pid = static_cast<long>((*daemon)->pid());

  // The URL with its token, from the file the daemon writes at start.
  std::string url;
  for (int i = 0; i < 100 && url.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    url = read_text(dir / "state" / "dashboard-url");
  }
  if (url.empty()) die("the daemon wrote no dashboard-url:\n" + read_text(dir / "daemon.log"));
  const auto colon = url.find(':', 7);
  const auto port = static_cast<std::uint16_t>(std::stoi(url.substr(colon + 1)));
  const auto token = url.substr(url.find("token=") + 6, 64);

  // Leaky Python workers, as in the dashboard test but slower: ~0.25 MiB a step, 10 steps a
  // second, recycled at 48 MiB; never done within the bench.
  for (int w = 0; w < workers; ++w) {
    const json job = {
        {"name", "leaky-" + std::to_string(w)},
        {"worker",
         {{"command",
           {"/usr/bin/python3",
            std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/leaky_worker.py"}}}},
        {"shard", {{"steps", 100000}}},
        {"memory", {{"soft_limit_mib", 48}, {"hard_limit_mib", 128}, {"poll_ms", 250}}},
        {"params", {{"total_steps", 100000}, {"leak_mib_per_step", 0.25}, {"step_ms", step_ms}}}};
    const auto file = dir / ("job-" + std::to_string(w) + ".json");
    std::ofstream(file) << job.dump();
    baton::os::spawn_options s;
    s.argv = {BATON_EXE, "submit", file.string(), "--socket", (dir / "s.sock").string()};
    s.stderr_log = dir / "submit.log";
    // An io_context of its own, as the tests' run_baton does: the daemon's stays untouched.
    asio::io_context sub_io;
    auto p = baton::os::spawn(sub_io, s);
    if (!p) die("cannot run baton submit: " + p.error().message);
    (*p)->async_read_lines([](const boost::system::error_code&, std::string_view) {});
    (*p)->async_wait([](const boost::system::error_code&, baton::os::exit_status) {});
    sub_io.run_for(30s);
  }

  dashboard_client page(port, token);
  // The page load: the document and its four files, once.
  for (const char* f : {"/", "/assets/uPlot.min.css", "/assets/dashboard.css",
                        "/assets/uPlot.iife.min.js", "/assets/dashboard.js"}) {
    page.get(f);
  }
  page_state state;
  // Until every worker runs and has reported, polling as the page does from the start.
  const auto settle_until = std::chrono::steady_clock::now() + (quick ? 3s : 8s);
  while (std::chrono::steady_clock::now() < settle_until) {
    poll_like_the_page(page, state);
    std::this_thread::sleep_for(1s);
  }
  int running = 0;
  std::string states;
  const auto list = json::parse(page.get("/v1/jobs"));  // kept: the loop walks into it
  for (const auto& j : list.at("jobs")) {
    if (j.at("state") == "running") ++running;
    states += " " + j.at("state").get<std::string>();
  }

  std::vector<double> cpu_pct, rss;
  double cpu0 = cpu_seconds(pid);
  auto t0 = std::chrono::steady_clock::now();
  const double cpu_start = cpu0;
  const auto t_start = t0;
  // Windows of 5 s (1 s in --quick): the kernel counts CPU time in 10 ms ticks, so a 1 s window
  // of a mostly idle daemon reads 0% or 1%, nothing between.
  const int window = quick ? 1 : 5;
  for (int s = 1; s <= seconds; ++s) {
    const auto tick = t_start + std::chrono::seconds(s);
    if (dashboard) poll_like_the_page(page, state);
    std::this_thread::sleep_until(tick);
    if (s % window != 0 && s != seconds) continue;
    const double cpu1 = cpu_seconds(pid);
    const auto t1 = std::chrono::steady_clock::now();
    cpu_pct.push_back(100.0 * (cpu1 - cpu0) / std::chrono::duration<double>(t1 - t0).count());
    rss.push_back(rss_bytes(pid));
    cpu0 = cpu1;
    t0 = t1;
  }
  const double overall =
      100.0 * (cpu_seconds(pid) - cpu_start) /
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const double rss_peak = *std::max_element(rss.begin(), rss.end());
  const double cpu_peak = *std::max_element(cpu_pct.begin(), cpu_pct.end());

  (void)(*daemon)->signal_group(baton::os::group_signal::terminate);
  bool exited = false;
  (*daemon)->async_read_lines([](const boost::system::error_code&, std::string_view) {});
  (*daemon)->async_wait(
      [&](const boost::system::error_code&, baton::os::exit_status) { exited = true; });
  const auto stop_deadline = std::chrono::steady_clock::now() + 20s;
  while (!exited && std::chrono::steady_clock::now() < stop_deadline) io.run_for(50ms);
  if (!exited) (void)(*daemon)->signal_group(baton::os::group_signal::kill);

  const double rss_median_mb = median(rss) / 1e6;
  const double cpu_median = median(cpu_pct);
  std::printf("daemon_overhead_bench%s: %d workers (%d running), %s (%zu requests), %d s\n",
              quick ? " --quick" : "", workers, running,
              dashboard ? "dashboard replayed at 1 Hz" : "dashboard closed after the settle",
              page.requests(), seconds);
  std::printf(
      "workload: each worker reports progress every %d ms, RSS sampled every 250 ms, "
      "recycled at 48 MiB (after ~150 steps)\n",
      step_ms);
  std::printf("CPU: %s\n", cpu_model().c_str());
  std::printf("daemon RSS: median %.1f MB, peak %.1f MB   (goal < 16 MB: %s)\n", rss_median_mb,
              rss_peak / 1e6, rss_peak / 1e6 < 16.0 ? "PASS" : "FAIL");
  std::printf(
      "daemon CPU: median %.2f%%, peak %.2f%%, over the run %.2f%% of one core   "
      "(goal < 1%%: %s)\n",
      cpu_median, cpu_peak, overall, overall < 1.0 ? "PASS" : "FAIL");
  if (running < workers) {
    std::printf("note: only %d of %d jobs were running (states:%s); see %s\n", running, workers,
                states.c_str(), dir.string().c_str());
    return 0;  // the folder is kept to look at
  }
  fs::remove_all(dir);
  return 0;
}
