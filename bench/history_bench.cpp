// How long the history API (`GET /v1/jobs/{id}/history?since=N`) takes to answer for a job with
// 10^6 progress reports and 10^5 RSS samples (issue 13's figure: under 50 ms). Times what the
// daemon does per request: route the request, take the page from the history, build its JSON and
// serialise it as the control session does; for a running job (history in memory), a job at rest
// (the file read back from disk first), and a live poller asking only for what is new. Prints
// medians of 9 runs, the answer's size and the CPU model; never asserts timing (shared machines
// are noisy). `--quick` uses a history 100x smaller and one run, for a ctest smoke run.
//   history_bench [--quick] [--runs N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_figures.h"
#include "os/env.h"
#include "os/system.h"
#include "supervisor/control_api.h"
#include "supervisor/job_history.h"

using baton::os::env;
using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

using baton::bench::cpu_model;
using baton::bench::median;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& what, const baton::error& e) {
  std::fprintf(stderr, "history_bench: %s: %s\n", what.c_str(), e.message.c_str());
  std::exit(1);
}

// What one request costs the daemon, answer bytes returned.
std::size_t answer(const job_history& h, std::int64_t since) {
  auto call =
      parse_api_request({"GET", "/v1/jobs/bench/history?since=" + std::to_string(since), "", 0});
  if (!call) std::exit(2);
  const auto& c = std::get<history_call>(*call);
  const auto body = to_json(h.page(c.since));
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size() + 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int runs = 9;
  fs::path dir = fs::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: history_bench [--quick] [--runs N] [--dir PATH]\n");
      return 1;
    }
  }
  const int rss_samples = quick ? 1000 : 100000;
  const int progress_per_rss = 10;
  if (quick) runs = 1;

  auto& e = env::default_env();
  const fs::path job_dir =
      dir / ("baton-history-bench-" + std::to_string(baton::os::current_pid()));
  if (auto s = e.create_dirs(job_dir); !s) die("create " + job_dir.string(), s.error());
  const auto file = job_history::file_in(job_dir);
  auto opened = job_history::open(e, file);
  if (!opened) die("open", opened.error());
  auto& h = *opened;

  const auto t_fill = std::chrono::steady_clock::now();
  std::int64_t step = 0;
  for (int i = 0; i < rss_samples; ++i) {
    const std::int64_t pid = 1000 + i / 10000;
    if (auto s = h.add_rss(i * 100, pid, i / 10000, step, (100u << 20) + (i % 10000) * 1024u); !s) {
      die("add_rss", s.error());
    }
    for (int k = 0; k < progress_per_rss; ++k) {
      ++step;
      if (auto s = h.add_progress(step * 10, step, step / 1000, 1.0 / step, {{"accuracy", 0.5}});
          !s) {
        die("add_progress", s.error());
      }
    }
  }
  const double fill_ms = ms_since(t_fill);
  const double adds = rss_samples * (1.0 + progress_per_rss);

  std::vector<double> live, at_rest, poll;
  std::size_t live_bytes = 0, poll_bytes = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    live_bytes = answer(h, 0);
    live.push_back(ms_since(t0));

    t0 = std::chrono::steady_clock::now();
    auto loaded = job_history::load(e, file);
    if (!loaded) die("load", loaded.error());
    (void)answer(*loaded, 0);
    at_rest.push_back(ms_since(t0));

    t0 = std::chrono::steady_clock::now();
    poll_bytes = answer(h, h.last_seq() - 11);
    poll.push_back(ms_since(t0));
  }
  std::printf("history_bench: %d RSS samples + %d progress reports, median of %d run%s, CPU: %s\n",
              rss_samples, rss_samples * progress_per_rss, runs, runs == 1 ? "" : "s",
              cpu_model().c_str());
  std::printf("  held: %zu entries in memory, %llu bytes on disk; adding one costs %.2f us\n",
              h.size(), static_cast<unsigned long long>(h.file_bytes()), fill_ms * 1000 / adds);
  std::printf("  since=0, running job (in memory): %8.2f ms, %zu bytes\n", median(live),
              live_bytes);
  std::printf("  since=0, job at rest (read file): %8.2f ms\n", median(at_rest));
  std::printf("  since=next-11, a live poller:     %8.3f ms, %zu bytes\n", median(poll),
              poll_bytes);
  std::error_code ec;
  fs::remove_all(job_dir, ec);
  return 0;
}
