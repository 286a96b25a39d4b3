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
//                      [--side-by-side]
// --baseline-worker: each round also runs the cut job with that baton-worker (BATON_WORKER), e.g.
// one built from the commit before a change, and prints its ratio and the paired saving.
// --side-by-side: the cut job and the unbroken one run at the same time, each on a CPU of its own
// (taskset) and one thread, swapping CPUs every round: on a machine whose speed drifts by tens of
// percent over seconds (a shared VM), runs side by side meet the same drift, which runs one after
// the other do not. It measures the one-thread job; the two jobs share the L3 cache and memory
// bandwidth, so the cut job's saves and reads also slow the run beside it a little (the ratio
// reads a little low). Needs two CPUs; exits 77 (skipped) where there are fewer.
// --quick: 2 epochs of a 500-sample job, one pair (a ctest smoke run: it still builds and runs).
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "bench_figures.h"
#include "machine_peaks.h"
#include "os/env.h"
#include "os/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using baton::bench::cpu_model;
using baton::bench::die;
using baton::bench::median;

const char* const baton::bench::bench_name = "shard_switch_bench";

namespace {

// What fresh memory costs here, beside the CPU's name: a switch fills the next worker's state
// (48 MiB for the seed job) and a checkpoint's page cache from memory never touched before, and
// under a hypervisor that alone can take a large part of the switch (10 us a 4 KiB fault, and
// up to 2-4 ms a huge page the host backs afresh, on one VM). Without it, a switch figure from
// a VM reads like a regression against one from bare metal.
void print_fresh_memory() {
  constexpr std::size_t bytes = std::size_t{48} << 20;
  const auto huge = baton::bench::fresh_fault_in_ms(bytes, true, 5);
  const auto small = baton::bench::fresh_fault_in_ms(bytes, false, 5);
  if (huge.first < 0 || small.first < 0) die("no memory to measure fresh memory with");
  std::printf(
      "fresh memory: faulting in 48 MiB (about the seed job's worker state) takes %.1f ms on "
      "huge pages (%.1f ms the first time), %.1f ms on 4 KiB pages (%.2f us a page); medians "
      "of 5\n",
      huge.median, huge.first, small.median,
      small.median * 1000.0 / static_cast<double>(bytes / 4096));
}

struct run_result {
  double seconds = 0;
  std::size_t workers = 0;
  // The time the run's workers spent training, by their own clocks (each worker's last log
  // line), with each shard's first step counted as one of its later ones: what is left of
  // `seconds` is set-up, restores, saves and hand-overs. A machine slowing down mid-epoch moves
  // both alike. Empty for a worker that does not log its timings (a baseline from before them).
  std::optional<double> training;
  double overhead() const { return training ? seconds - *training : NAN; }
};

// Sums "N steps in T s (the first F ms[; the first H in A ms, the last L in B ms])" over the
// lines of a job log (worker/worker_main.cpp): each shard's time with its first and last steps
// at the pace of the ones between (a worker from before the edges' timing: its first step at
// the mean of its others).
std::optional<double> training_seconds(const fs::path& log) {
  std::ifstream in(log);
  if (!in) return std::nullopt;
  const std::regex shard(
      R"(\((?:.*, )?(\d+) steps in ([0-9.]+) s \(the first ([0-9.]+) ms)"
      R"((?:; the first (\d+) in ([0-9.]+) ms, the last (\d+) in ([0-9.]+) ms)?\))");
  std::optional<double> total;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, shard)) {
      // A format this bench no longer reads would silently leave the steps out of training.
      if (line.find(" steps in ") != std::string::npos && line.find("wrote ") != std::string::npos)
        die("cannot read the training time in " + log.string() + ": " + line);
      continue;
    }
    const double n = std::stod(m[1].str()), t = std::stod(m[2].str());
    const double first = std::stod(m[3].str()) / 1000.0;
    if (m[4].matched) {
      // A worker that timed its shard's edges: the middle's pace for every step, so that what a
      // switch costs the steps around it is the switch's.
      const double head = std::stod(m[4].str()), tail = std::stod(m[6].str());
      const double edges = (std::stod(m[5].str()) + std::stod(m[7].str())) / 1000.0;
      total = total.value_or(0.0) + (t - edges) * n / (n - head - tail);
    } else {
      total = total.value_or(0.0) + (n > 1 ? (t - first) * n / (n - 1) : t);
    }
  }
  return total;
}

// One `baton run` of the seed job under way, with `sets` on top: timed from its spawn to its
// exit, which the io_context it was started on reports.
class seed_run {
 public:
  // `cpu`: run it and every worker it starts on that CPU alone (taskset, util-linux).
  seed_run(boost::asio::io_context& io, const fs::path& state, const std::vector<std::string>& sets,
           const std::string& worker = {}, std::optional<int> cpu = {}) {
    baton::os::spawn_options o;
    if (cpu) o.argv = {"taskset", "--cpu-list", std::to_string(*cpu)};
    o.argv.insert(o.argv.end(),
                  {BATON_EXE, "run", std::string(BATON_SOURCE_DIR) + "/configs/seed.json",
                   "--fresh", "--json", "--state-dir", state.string()});
    for (const auto& s : sets) {
      o.argv.push_back("--set");
      o.argv.push_back(s);
    }
    if (!worker.empty()) o.env.emplace_back("BATON_WORKER", worker);
    err_log_ = o.stderr_log = state.string() + ".err";
    state_ = state;
    start_ = std::chrono::steady_clock::now();
    auto p = baton::os::spawn(io, o);
    if (!p) die("cannot run " + o.argv.front() + ": " + p.error().message);
    process_ = std::move(*p);
    process_->async_read_lines([this](const boost::system::error_code& ec, std::string_view line) {
      if (!ec) out_ += std::string(line) + "\n";
    });
    process_->async_wait([this](const boost::system::error_code&, baton::os::exit_status s) {
      seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      status_ = s;
    });
  }
  seed_run(const seed_run&) = delete;
  seed_run& operator=(const seed_run&) = delete;

  // After the io_context has run: the run's figures, or the bench stops with why it cannot.
  run_result result() const {
    if (!status_ || !status_->success()) {
      die("baton run did not complete; see " + err_log_.string());
    }
    const auto summary = json::parse(out_, nullptr, false);
    if (summary.is_discarded() || summary.value("state", "") != "completed") {
      die("baton run did not report a completed job: " + out_);
    }
    return {seconds_, summary.at("shards").size(),
            training_seconds(state_ / "jobs" / "seed" / "worker.log")};
  }

 private:
  std::unique_ptr<baton::os::process> process_;
  std::chrono::steady_clock::time_point start_;
  fs::path state_, err_log_;
  std::string out_;
  std::optional<baton::os::exit_status> status_;
  double seconds_ = 0;
};

// One whole `baton run` of the seed job with `sets` on top, alone on the machine.
run_result run_seed(const fs::path& state, const std::vector<std::string>& sets,
                    const std::string& worker = {}) {
  boost::asio::io_context io;
  seed_run r(io, state, sets, worker);
  io.run_for(1800s);
  return r.result();
}

// Two runs at once, each on a CPU of its own: a machine that slows down slows both alike.
std::pair<run_result, run_result> run_side_by_side(const fs::path& dir,
                                                   const std::vector<std::string>& a_sets,
                                                   int a_cpu,
                                                   const std::vector<std::string>& b_sets,
                                                   int b_cpu, const std::string& a_worker = {}) {
  boost::asio::io_context io;
  seed_run a(io, dir / "state-a", a_sets, a_worker, a_cpu);
  seed_run b(io, dir / "state-b", b_sets, {}, b_cpu);
  io.run_for(1800s);
  return {a.result(), b.result()};
}

// The exit code of a run that cannot happen on this machine (ctest's SKIP_RETURN_CODE).
constexpr int skipped_exit = 77;

// The first two CPUs this process may run on (Cpus_allowed_list, e.g. "0-3" or "2,5-7").
std::vector<int> allowed_cpus() {
  auto status = baton::os::env::default_env().read_file("/proc/self/status");
  if (!status) die("--side-by-side: cannot read /proc/self/status: " + status.error().message);
  const auto at = status->find("Cpus_allowed_list:");
  if (at == std::string::npos) die("--side-by-side: no Cpus_allowed_list in /proc/self/status");
  const auto end = status->find('\n', at);
  std::string list = status->substr(at + 18, end - at - 18);
  list.erase(0, list.find_first_not_of(" \t"));
  std::vector<int> cpus;
  const char* p = list.data();
  const char* const last_char = list.data() + list.size();
  while (p < last_char && cpus.size() < 2) {
    if (*p == ' ' || *p == '\t' || *p == ',') {
      ++p;
      continue;
    }
    int first = 0, last = 0;
    auto r = std::from_chars(p, last_char, first);
    if (r.ec != std::errc()) die("--side-by-side: cannot read Cpus_allowed_list \"" + list + "\"");
    p = r.ptr;
    last = first;
    if (p < last_char && *p == '-') {
      r = std::from_chars(p + 1, last_char, last);
      if (r.ec != std::errc())
        die("--side-by-side: cannot read Cpus_allowed_list \"" + list + "\"");
      p = r.ptr;
    }
    for (int c = first; c <= last && cpus.size() < 2; ++c) cpus.push_back(c);
  }
  if (cpus.size() < 2) {
    // Not a failure of the bench: ctest shows its smoke run as skipped (SKIP_RETURN_CODE).
    std::fprintf(stderr, "%s: --side-by-side needs two CPUs; this process may run on %s only\n",
                 baton::bench::bench_name, list.c_str());
    std::exit(skipped_exit);
  }
  return cpus;
}

// --side-by-side: each round runs the cut job and the unbroken one at the same time, one CPU
// and one thread each, swapping CPUs every round; then the cut job without starting ahead
// against the unbroken one the same way (and the baseline worker's cut job, if given).
int side_by_side(const fs::path& dir, int epochs, int pairs, bool quick,
                 const std::vector<std::string>& sharded_sets,
                 const std::vector<std::string>& serial_sets,
                 const std::vector<std::string>& whole_sets, const std::string& baseline_worker) {
  const auto cpus = allowed_cpus();
  std::vector<double> ratios, serial_ratios, baseline_ratios, switch_share, serial_switch_share;
  std::size_t sharded_workers = 0;
  for (int i = 0; i < pairs; ++i) {
    const int cut_cpu = cpus[i % 2], whole_cpu = cpus[1 - i % 2];
    const auto [a, b] = run_side_by_side(dir, sharded_sets, cut_cpu, whole_sets, whole_cpu);
    const auto [c, d] = run_side_by_side(dir, serial_sets, cut_cpu, whole_sets, whole_cpu);
    sharded_workers = a.workers;
    ratios.push_back(a.seconds / b.seconds);
    serial_ratios.push_back(c.seconds / d.seconds);
    // One switch against one epoch of the unbroken run beside it.
    switch_share.push_back((a.seconds - b.seconds) / (epochs - 1) / (b.seconds / epochs));
    serial_switch_share.push_back((c.seconds - d.seconds) / (epochs - 1) / (d.seconds / epochs));
    std::printf(
        "round %d: %d x 1-epoch shards %.3f s (CPU %d, %zu workers) beside 1 x %d-epoch shard "
        "%.3f s (CPU %d): %.3f; without starting ahead %.3f s beside %.3f s: %.3f\n",
        i + 1, epochs, a.seconds, cut_cpu, a.workers, epochs, b.seconds, whole_cpu,
        a.seconds / b.seconds, c.seconds, d.seconds, c.seconds / d.seconds);
    if (!baseline_worker.empty()) {
      const auto [e, f] =
          run_side_by_side(dir, sharded_sets, cut_cpu, whole_sets, whole_cpu, baseline_worker);
      baseline_ratios.push_back(e.seconds / f.seconds);
      std::printf("round %d: baseline worker, %d x 1-epoch shards %.3f s beside %.3f s: %.3f\n",
                  i + 1, epochs, e.seconds, f.seconds, e.seconds / f.seconds);
    }
  }
  fs::remove_all(dir);
  const double r = median(ratios);
  std::printf(
      "shard_switch_bench --side-by-side%s: seed job, %d epochs, 1 thread, %d rounds of runs at "
      "the same time on CPUs %d and %d\n",
      quick ? " --quick (500 samples)" : "", epochs, pairs, cpus[0], cpus[1]);
  std::printf("CPU: %s\n", cpu_model().c_str());
  print_fresh_memory();
  std::printf(
      "median ratio, %zu shards / one shard beside it: %.3f (goal <= 1.05: %s); range %.3f "
      "to %.3f\n",
      sharded_workers, r, r <= 1.05 ? "PASS" : "FAIL",
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()));
  std::printf("one switch: %.1f%% of a one-epoch shard (median)\n", 100.0 * median(switch_share));
  std::printf("without starting ahead: ratio %.3f, one switch %.1f%% of a one-epoch shard\n",
              median(serial_ratios), 100.0 * median(serial_switch_share));
  if (!baseline_worker.empty()) {
    std::printf("baseline worker %s: ratio %.3f\n", baseline_worker.c_str(),
                median(baseline_ratios));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, beside = false;
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
    } else if (a == "--side-by-side") {
      beside = true;
    } else if (a == "--baseline-worker") {
      if (i + 1 >= argc) die(a + " needs a path");
      baseline_worker = fs::absolute(argv[++i]).string();
      if (!fs::exists(baseline_worker))
        die("--baseline-worker " + baseline_worker + ": no such file");
    } else {
      die("unknown argument " + a +
          " (usage: shard_switch_bench [--quick] [--epochs E] [--pairs N] [--threads T] "
          "[--baseline-worker PATH] [--side-by-side])");
    }
  }
  if (beside && threads > 1) die("--side-by-side runs every job on one thread");
  if (beside) threads = 1;
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
  // By the workers' clocks, the baseline worker's time outside training, and this worker's less
  // the baseline's in the same round: the A/B of a switch without the epochs' drift in it.
  std::vector<double> baseline_overhead, overhead_gain;
  std::vector<double> sharded_overhead, serial_overhead, whole_overhead, whole_training;
  bool clocked = true;  // every run's job log had its workers' timing lines
  auto with = [&](std::vector<std::string> extra) {
    auto s = common;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  const auto sharded_sets = with({"shard.epochs=1"});
  const auto serial_sets = with({"shard.epochs=1", "worker.start_ahead=false"});
  const auto whole_sets = with({"shard.epochs=" + std::to_string(epochs)});
  if (beside) {
    return side_by_side(dir, epochs, pairs, quick, sharded_sets, serial_sets, whole_sets,
                        baseline_worker);
  }
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
    clocked = clocked && a.training && b.training && c.training;
    if (clocked) {
      sharded_overhead.push_back(a.overhead());
      serial_overhead.push_back(c.overhead());
      whole_overhead.push_back(b.overhead());
      whole_training.push_back(*b.training);
    }
    std::printf(
        "round %d: %d x 1-epoch shards %.3f s (%zu workers), the same without starting ahead "
        "%.3f s, 1 x %d-epoch shard %.3f s\n",
        i + 1, epochs, a.seconds, a.workers, c.seconds, epochs, b.seconds);
    if (!baseline_worker.empty()) {
      baseline.push_back(d.seconds);
      baseline_gain.push_back(d.seconds - a.seconds);
      if (a.training && d.training) {
        baseline_overhead.push_back(d.overhead());
        overhead_gain.push_back(d.overhead() - a.overhead());
      }
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
  print_fresh_memory();
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
  // By the workers' own clocks: each run's time outside training, the cut run's against the
  // unbroken one's, so the switches are timed apart from epochs the machine may slow down.
  if (!clocked) {
    std::printf(
        "by the workers' clocks: not measured; a job log lacked the workers' timing lines (the "
        "closing \"wrote ... (set-up ...)\" line of worker/worker_main.cpp)\n");
  } else {
    const double so = median(sharded_overhead), wo = median(whole_overhead);
    const double train = median(whole_training);
    const double clocked_switch = (so - wo) / (epochs - 1);
    const double serial_switch = (median(serial_overhead) - wo) / (epochs - 1);
    std::printf(
        "by the workers' clocks: time outside training %.3f s cut, %.3f s unbroken; one switch "
        "%.3f s, %.1f%% of a one-epoch shard's training (%.3f s); ratio at the unbroken run's "
        "training time %.3f (goal <= 1.05: %s); without starting ahead one switch %.3f s\n",
        so, wo, clocked_switch, 100.0 * clocked_switch / (train / epochs), train / epochs,
        (train + so) / (train + wo), (train + so) / (train + wo) <= 1.05 ? "PASS" : "FAIL",
        serial_switch);
  }
  if (!baseline_worker.empty()) {
    std::printf(
        "baseline worker %s: %d shards %.3f s, ratio %.3f (against this worker's unbroken run); "
        "this worker saves a median %.3f s a run in the same rounds\n",
        baseline_worker.c_str(), epochs, median(baseline), median(baseline) / mw,
        median(baseline_gain));
    if (!clocked || baseline_overhead.size() != baseline.size()) {
      std::printf(
          "baseline worker by the workers' clocks: not measured; its job log lacked the timing "
          "lines\n");
    } else {
      const double bo = median(baseline_overhead), wo = median(whole_overhead);
      std::printf(
          "baseline worker by the workers' clocks: time outside training %.3f s cut, one switch "
          "%.3f s; this worker spends a median %.3f s less outside training a run (%.3f s a "
          "switch), paired in the same rounds\n",
          bo, (bo - wo) / (epochs - 1), median(overhead_gain),
          median(overhead_gain) / (epochs - 1));
    }
  }
  return 0;
}
