// What a shard switch costs (issue 15's goal: at most 5% of a one-epoch shard of the seed job):
// the seed job (configs/seed.json) run by `baton run` as E one-epoch shards against the same
// job as one E-epoch shard, whole processes timed from spawn to exit, in rounds (sharded,
// sharded without starting ahead, whole, ...) so a machine that slows down mid-run slows all.
// Each switch is the old worker's save and exit, the supervisor's verification and the new
// worker's spawn, data and model set-up and restore; with E shards there are E - 1 of them, so
//   switch cost = (median sharded - median whole) / (E - 1), shown against one epoch's time
//   (median whole / E), and the ratio sharded / whole (goal at most 1.05 for E = 5). The
// baseline is the same sharded run with worker.start_ahead false: every next worker starts only
// after the previous one has exited (protocol/README.md, "Starting ahead"). Each round's runs
// alternate in order, and the median of the rounds' own sharded / whole ratios is printed too.
// Prints the CPU model, every run, the medians and the ratios; never fails on a figure.
//   shard_switch_bench [--quick] [--epochs E] [--pairs N] [--threads T] [--baseline-worker PATH]
// --baseline-worker: each round also runs the cut job with that baton-worker (BATON_WORKER), e.g.
// one built from the commit before a change, and prints its ratio and the paired saving.
// --quick: 2 epochs of a 500-sample job, one pair (a ctest smoke run: it still builds and runs).
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
#include "os/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using baton::bench::cpu_model;
using baton::bench::die;
using baton::bench::median;

const char* const baton::bench::bench_name = "shard_switch_bench";

namespace {

struct run_result {
  double seconds = 0;
  std::size_t workers = 0;
};

// One whole `baton run` of the seed job with `sets` on top; its wall time and worker count.
run_result run_seed(const fs::path& state, const std::vector<std::string>& sets,
                    const std::string& worker = {}) {
  boost::asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {BATON_EXE,     "run",    std::string(BATON_SOURCE_DIR) + "/configs/seed.json",
            "--fresh",     "--json", "--state-dir",
            state.string()};
  for (const auto& s : sets) {
    o.argv.push_back("--set");
    o.argv.push_back(s);
  }
  if (!worker.empty()) o.env.emplace_back("BATON_WORKER", worker);
  o.stderr_log = state.parent_path() / "run.err";
  const auto start = std::chrono::steady_clock::now();
  auto p = baton::os::spawn(io, o);
  if (!p) die("cannot run baton: " + p.error().message);
  std::string out;
  std::optional<baton::os::exit_status> st;
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (!ec) out += std::string(line) + "\n";
  });
  (*p)->async_wait([&](const boost::system::error_code&, baton::os::exit_status s) { st = s; });
  io.run_for(1800s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!st || !st->success()) die("baton run did not complete; see " + o.stderr_log.string());
  const auto summary = json::parse(out, nullptr, false);
  if (summary.is_discarded() || summary.value("state", "") != "completed") {
    die("baton run did not report a completed job: " + out);
  }
  return {seconds, summary.at("shards").size()};
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int epochs = 5, pairs = 3, threads = 0;
  std::string baseline_worker;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) die(a + " needs a value");
      return std::atoi(argv[++i]);
    };
    if (a == "--quick") {
      quick = true;
    } else if (a == "--epochs") {
      epochs = next();
    } else if (a == "--pairs") {
      pairs = next();
    } else if (a == "--threads") {
      threads = next();
    } else if (a == "--baseline-worker") {
      if (i + 1 >= argc) die(a + " needs a path");
      baseline_worker = fs::absolute(argv[++i]).string();
      if (!fs::exists(baseline_worker))
        die("--baseline-worker " + baseline_worker + ": no such file");
    } else {
      die("unknown argument " + a +
          " (usage: shard_switch_bench [--quick] [--epochs E] [--pairs N] [--threads T] "
          "[--baseline-worker PATH])");
    }
  }
  std::vector<std::string> common = {"training.threads=" + std::to_string(threads)};
  if (quick) {
    epochs = 2;
    pairs = 1;
    common.push_back("data.samples=500");
  }
  if (epochs < 2 || pairs < 1) die("--epochs must be at least 2 and --pairs at least 1");
  common.push_back("training.epochs=" + std::to_string(epochs));
  const auto dir = fs::temp_directory_path() /
                   ("baton-shard-switch-bench-" +
                    std::to_string(std::chrono::system_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);

  std::vector<double> sharded, serial, whole;
  std::size_t sharded_workers = 0;
  std::vector<double> round_ratios, baseline, baseline_gain;
  auto with = [&](std::vector<std::string> extra) {
    auto s = common;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  const auto sharded_sets = with({"shard.epochs=1"});
  const auto serial_sets = with({"shard.epochs=1", "worker.start_ahead=false"});
  const auto whole_sets = with({"shard.epochs=" + std::to_string(epochs)});
  for (int i = 0; i < pairs; ++i) {
    // Every second round (rounds 2, 4, ...) runs its three or four in reverse, so that no kind of
    // run is always the one that meets a machine slowing down or speeding up within a round.
    run_result a, b, c, d;
    const auto run_baseline = [&] {
      if (!baseline_worker.empty()) d = run_seed(dir / "state", sharded_sets, baseline_worker);
    };
    if (i % 2 == 0) {
      a = run_seed(dir / "state", sharded_sets);
      c = run_seed(dir / "state", serial_sets);
      b = run_seed(dir / "state", whole_sets);
      run_baseline();
    } else {
      run_baseline();
      b = run_seed(dir / "state", whole_sets);
      c = run_seed(dir / "state", serial_sets);
      a = run_seed(dir / "state", sharded_sets);
    }
    sharded.push_back(a.seconds);
    sharded_workers = a.workers;
    serial.push_back(c.seconds);
    whole.push_back(b.seconds);
    round_ratios.push_back(a.seconds / b.seconds);
    std::printf(
        "round %d: %d x 1-epoch shards %.3f s (%zu workers), the same without starting ahead "
        "%.3f s, 1 x %d-epoch shard %.3f s\n",
        i + 1, epochs, a.seconds, a.workers, c.seconds, epochs, b.seconds);
    if (!baseline_worker.empty()) {
      baseline.push_back(d.seconds);
      baseline_gain.push_back(d.seconds - a.seconds);
      std::printf("round %d: baseline worker, %d x 1-epoch shards %.3f s\n", i + 1, epochs,
                  d.seconds);
    }
  }
  fs::remove_all(dir);

  const double ms = median(sharded), mw = median(whole), mserial = median(serial);
  const double per_switch = (ms - mw) / (epochs - 1);
  const double per_serial_switch = (mserial - mw) / (epochs - 1);
  const double epoch = mw / epochs;
  std::printf("shard_switch_bench%s: seed job, %d epochs, threads %s, %d rounds\n",
              quick ? " --quick (500 samples)" : "", epochs,
              threads == 0 ? "auto" : std::to_string(threads).c_str(), pairs);
  std::printf("CPU: %s\n", cpu_model().c_str());
  std::printf("median: %zu shards %.3f s, one shard %.3f s; ratio %.3f (goal <= 1.05: %s)\n",
              sharded_workers, ms, mw, ms / mw, ms / mw <= 1.05 ? "PASS" : "FAIL");
  // On a machine whose speed drifts between rounds (a shared VM), the ratio within each round,
  // of runs seconds apart, is the steadier figure; both are printed.
  std::printf("median of the rounds' own ratios %.3f (runs of one round are seconds apart)\n",
              median(round_ratios));
  std::printf("one switch: %.3f s, %.1f%% of a one-epoch shard (%.3f s)\n", per_switch,
              100.0 * per_switch / epoch, epoch);
  std::printf(
      "without starting ahead: %zu shards %.3f s, ratio %.3f, one switch %.3f s; starting ahead "
      "makes a switch %.2fx as long\n",
      sharded_workers, mserial, mserial / mw, per_serial_switch,
      per_serial_switch > 0 ? per_switch / per_serial_switch : 0.0);
  if (!baseline_worker.empty()) {
    std::printf(
        "baseline worker %s: %d shards %.3f s, ratio %.3f (against this worker's unbroken run); "
        "this worker saves a median %.3f s a run in the same rounds\n",
        baseline_worker.c_str(), epochs, median(baseline), median(baseline) / mw,
        median(baseline_gain));
  }
  return 0;
}
