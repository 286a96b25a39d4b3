// What a resumed worker costs in memory and start-up (issue 15's goal: its peak RSS at most 1.2x
// its state). The seed job (configs/seed.json) is trained one step into a checkpoint; then, run
// after run, a fresh baton-worker resumes from it for one step (--max-steps 1), spawned by a
// small intermediate process (this program with --measure-one) that has no other child, so the
// OS's accounting of its waited-for children (getrusage RUSAGE_CHILDREN, ru_maxrss) is that one
// worker's peak RSS, which no sampler can miss. The worker's state is everything its checkpoint
// holds (weights, Adam's m and v, sample order, generator; the file's size). Also timed, from the
// spawn: the worker ready to train (its first progress line, sent after the restore) and its
// first step done (the progress line after it). A worker that stops at once (a missing job file)
// gives the program's own floor: code and libraries, which no state size changes.
// Prints the CPU model, every run, the medians and the ratio; never fails on a figure.
//   resume_bench [--quick] [--runs N] [--threads T] [--worker PATH]
// --quick: a 500-sample job with 200-unit layers and 2 runs (a ctest smoke run).
// --worker: another baton-worker build to measure (another commit's, to compare).
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_figures.h"
#include "os/env.h"
#include "os/process.h"
#include "os/self_memory.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using baton::bench::cpu_model;
using baton::bench::die;
using baton::bench::median;

const char* const baton::bench::bench_name = "resume_bench";

namespace {

using clock_type = std::chrono::steady_clock;

struct spawned {
  baton::os::exit_status status;
  std::vector<std::pair<double, std::string>> lines;  // seconds since the spawn, stdout line
};

spawned run(const std::vector<std::string>& argv, const fs::path& stderr_log) {
  boost::asio::io_context io;
  baton::os::spawn_options o;
  o.argv = argv;
  o.stderr_log = stderr_log;
  const auto start = clock_type::now();
  auto p = baton::os::spawn(io, o);
  if (!p) die("cannot run " + argv[0] + ": " + p.error().message);
  spawned out;
  std::optional<baton::os::exit_status> st;
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (ec) return;
    out.lines.emplace_back(std::chrono::duration<double>(clock_type::now() - start).count(),
                           std::string(line));
  });
  (*p)->async_wait([&](const boost::system::error_code&, baton::os::exit_status s) { st = s; });
  io.run_for(600s);
  if (!st) die(argv[0] + " did not end within 600 s; see " + stderr_log.string());
  out.status = *st;
  return out;
}

// The intermediate process: runs the worker once and prints what it measured as one JSON line.
int measure_one(const std::vector<std::string>& worker_argv, const fs::path& stderr_log) {
  const spawned s = run(worker_argv, stderr_log);
  std::vector<double> progress;
  for (const auto& [t, line] : s.lines) {
    const auto m = json::parse(line, nullptr, false);
    if (!m.is_discarded() && m.is_object() && m.value("type", "") == "progress") {
      progress.push_back(t);
    }
  }
  auto peak = baton::os::waited_children_peak_rss_bytes();
  if (!peak) die(peak.error().message);
  json j = {{"ok", s.status.success()}, {"peak_rss_bytes", *peak}};
  if (progress.size() >= 1) j["ready_s"] = progress[0];
  if (progress.size() >= 2) j["first_step_s"] = progress[1];
  if (!s.lines.empty()) j["exit_s"] = s.lines.back().first;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

json measured(const fs::path& dir, const std::vector<std::string>& worker_argv) {
  std::vector<std::string> argv = {BATON_BENCH_SELF, "--measure-one",
                                   (dir / "worker.err").string()};
  argv.insert(argv.end(), worker_argv.begin(), worker_argv.end());
  const spawned s = run(argv, dir / "measure.err");
  if (!s.status.success() || s.lines.empty()) {
    die("the measuring process failed; see " + (dir / "measure.err").string());
  }
  const auto j = json::parse(s.lines.back().second, nullptr, false);
  if (j.is_discarded()) die("the measuring process printed " + s.lines.back().second);
  return j;
}

double mib(double bytes) { return bytes / 1048576.0; }

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--measure-one") {
    return measure_one(std::vector<std::string>(argv + 3, argv + argc), argv[2]);
  }
  bool quick = false;
  int runs = 7, threads = 0;
  std::string worker_exe = BATON_WORKER_EXE;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) die(a + " needs a value");
      return std::atoi(argv[++i]);
    };
    if (a == "--quick") {
      quick = true;
    } else if (a == "--runs") {
      runs = next();
    } else if (a == "--threads") {
      threads = next();
    } else if (a == "--worker" && i + 1 < argc) {
      worker_exe = argv[++i];
    } else {
      die("unknown argument " + a +
          " (usage: resume_bench [--quick] [--runs N] [--threads T] [--worker PATH])");
    }
  }
  if (quick) runs = 2;
  if (runs < 1) die("--runs must be at least 1");

  auto& e = baton::os::env::default_env();
  auto seed = e.read_file(fs::path(BATON_SOURCE_DIR) / "configs" / "seed.json");
  if (!seed) die(seed.error().message);
  json job = json::parse(*seed, nullptr, false);
  if (job.is_discarded()) die("configs/seed.json is not JSON");
  job["training"]["threads"] = threads;
  if (quick) {
    job["data"]["samples"] = 500;
    for (auto& l : job["model"]["layers"]) {
      if (l["units"].get<int>() > 1) l["units"] = 200;
    }
  }
  const auto dir = fs::temp_directory_path() /
                   ("baton-resume-bench-" +
                    std::to_string(std::chrono::system_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  const fs::path job_file = dir / "job.json", ckpt = dir / "checkpoints";
  if (auto ok = baton::os::write_file_atomic(e, job_file, job.dump(2)); !ok) {
    die(ok.error().message);
  }
  const std::vector<std::string> worker = {
      worker_exe,    "--job", job_file.string(), "--checkpoint-dir", ckpt.string(),
      "--max-steps", "1"};
  // The checkpoint every run resumes from: step 1 of a fresh start.
  if (!run(worker, dir / "fresh.err").status.success()) {
    die("the fresh worker failed; see " + (dir / "fresh.err").string());
  }
  const fs::path first = ckpt / "ckpt-000000000001.safetensors",
                 second = ckpt / "ckpt-000000000002.safetensors";
  std::error_code ec;
  const double state = static_cast<double>(fs::file_size(first, ec));
  if (ec) die("no checkpoint after the fresh worker: " + ec.message());

  std::vector<double> peaks, ratios, ready, first_step, floors;
  for (int i = 0; i < runs; ++i) {
    const auto j = measured(dir, worker);
    if (!j.value("ok", false)) die("a resumed worker failed; see " + (dir / "worker.err").string());
    fs::remove(second, ec);  // so the next run resumes from step 1 again
    const double peak = j.at("peak_rss_bytes").get<double>();
    peaks.push_back(peak);
    ratios.push_back(peak / state);
    ready.push_back(j.value("ready_s", NAN));
    first_step.push_back(j.value("first_step_s", NAN));
    std::printf(
        "run %d: peak RSS %.1f MiB (%.3fx the state), ready %.1f ms, first step done "
        "%.1f ms\n",
        i + 1, mib(peak), peak / state, 1e3 * ready.back(), 1e3 * first_step.back());
    // The floor: the same program stopping at once, on a job file that is not there.
    auto bare = worker;
    bare[2] = (dir / "missing.json").string();
    floors.push_back(measured(dir, bare).at("peak_rss_bytes").get<double>());
  }
  fs::remove_all(dir);

  const double peak = median(peaks), floor = median(floors);
  std::printf("resume_bench%s: seed job resumed for one step, threads %s, %d runs, medians\n",
              quick ? " --quick (500 samples, 200-unit layers)" : "",
              threads == 0 ? "auto" : std::to_string(threads).c_str(), runs);
  std::printf("CPU: %s\nworker: %s\n", cpu_model().c_str(), worker_exe.c_str());
  std::printf("state (the checkpoint: weights, Adam m and v, order, generator): %.1f MiB\n",
              mib(state));
  std::printf("resumed worker peak RSS (ru_maxrss): %.1f MiB, %.3fx the state (goal <= 1.2: %s)\n",
              mib(peak), median(ratios), median(ratios) <= 1.2 ? "PASS" : "FAIL");
  std::printf(
      "of which the program itself (a worker that stops at once): %.1f MiB; the rest "
      "is %.3fx the state\n",
      mib(floor), (peak - floor) / state);
  std::printf("start-up from spawn: ready to train %.1f ms, first step done %.1f ms\n",
              1e3 * median(ready), 1e3 * median(first_step));
  return 0;
}
