// Chaos driver: one real `baton serve` daemon running real jobs (the example Python worker,
// leaking on purpose under a soft limit so memory recycles happen too), hit by a seeded schedule
// of SIGKILLs and SIGTERMs to workers and SIGKILLs of the daemon itself (restarted on the same
// state directory). After every event it checks the invariants below; every job that completes
// must end with weights bit-for-bit equal to the same job run undisturbed by `baton run`.
//
//   baton_chaos --events N [--seed S] [--work DIR]
//
// Invariants (any violation: message on stderr, exit 1):
//   known      the job answers GET /v1/jobs/<id> (also right after a daemon restart)
//   state      never failed or paused; completed means checkpoint_step == total_steps
//   verifies   the newest checkpoint file verifies, no file is rejected, and it is not older
//              than the record's checkpoint_step
//   monotone   the record's checkpoint_step and the shards' start steps never go backwards
//   one-worker at most one live process carries the job's BATON_JOB_DIR
//   no-orphan  after the daemon is SIGKILLed, no process of any job outlives it by more than 2 s
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/env.h"
#include "os/process.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_store.h"
#include "supervisor/control_client.h"
#include "supervisor/job_store.h"
#include "support/run_process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace control_client = baton::supervisor::control_client;

namespace {

struct violation : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw violation(what);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The job every run uses: 12 epochs of 8 steps, shards of 2 epochs, 4 MiB leaked per step past
// a 64 MiB soft limit (a recycle every few shards), restarts fast and forgiving (the driver's
// own kills must not trip the crash-loop cutoff).
json job_document(const std::string& name) {
  return {{"name", name},
          {"data", {{"type", "synthetic"}, {"samples", 2048}, {"features", 400}, {"seed", 3}}},
          {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
          {"training",
           {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
            {"batch_size", 256},
            {"epochs", 12}}},
          {"shard", {{"epochs", 2}}},
          {"memory", {{"soft_limit_mib", 64}, {"hard_limit_mib", 400}, {"poll_ms", 50}}},
          {"restart", {{"max_failures", 50}, {"backoff_initial_ms", 20}, {"backoff_max_ms", 100}}},
          {"worker",
           {{"command",
             {fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3",
              std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/train.py"}},
            {"stop_grace_ms", 2000}}},
          {"debug", {{"leak_mib_per_step", 4}}}};
}

std::string weights_of(const fs::path& checkpoint) {
  auto bytes = baton::env::default_env().read_file(checkpoint);
  require(bool(bytes), "cannot read " + checkpoint.string());
  auto c = baton::protocol::decode_checkpoint(*bytes, checkpoint.string());
  require(bool(c), "final checkpoint does not decode: " + checkpoint.string());
  std::string all;
  for (const auto& t : c->tensors) all += t.name + ":" + t.bytes;
  return all;
}

// Live (non-zombie) processes whose environment has an entry starting with `prefix`. With
// `roots_only`, only those whose parent does not match too: one per worker tree (a python3 that
// is a pyenv shim is a few bash processes before it is Python).
std::vector<std::int64_t> processes_with_env(const std::string& prefix, bool roots_only = false) {
  std::vector<std::int64_t> out;
  std::map<std::int64_t, std::int64_t> parent;
  for (const auto& d : fs::directory_iterator("/proc")) {
    const auto name = d.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_text(d.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z') continue;
    std::ifstream in(d.path() / "environ", std::ios::binary);
    for (std::string entry; std::getline(in, entry, '\0');) {
      if (entry.rfind(prefix, 0) == 0) {
        out.push_back(std::stoll(name));
        std::istringstream fields(stat.substr(close + 2));
        char state = 0;
        std::int64_t ppid = 0;
        fields >> state >> ppid;
        parent[out.back()] = ppid;
        break;
      }
    }
  }
  if (roots_only) {
    std::erase_if(out, [&](std::int64_t pid) { return parent.count(parent[pid]) > 0; });
  }
  return out;
}

class daemon_process {
 public:
  daemon_process(const fs::path& work) : work_(work), socket_(work / "s.sock") {
    baton::os::spawn_options o;
    o.argv = {BATON_EXE,  "serve",         "--state-dir", (work / "state").string(),
              "--socket", socket_.string()};
    o.stderr_log = work / "daemon.log";
    auto p = baton::os::spawn(io_, o);
    require(bool(p), "cannot start the daemon");
    proc_ = std::move(*p);
    proc_->async_read_lines([](const boost::system::error_code&, std::string_view) {});
    proc_->async_wait(
        [this](const boost::system::error_code&, baton::os::exit_status st) { status_ = st; });
    const auto deadline = clock_type::now() + 10s;
    while (clock_type::now() < deadline && !status_) {
      auto h = control_client::call(socket_, "GET", "/v1/health", nullptr, 1s);
      if (h && h->status == 200) return;
      io_.run_for(20ms);
    }
    throw violation("daemon did not come up");
  }
  ~daemon_process() {
    if (!status_) {
      (void)proc_->signal_group(baton::os::group_signal::terminate);
      wait(15s);
    }
  }

  const fs::path& socket() const { return socket_; }

  void kill_and_wait() {
    require(bool(proc_->signal_group(baton::os::group_signal::kill)), "cannot kill the daemon");
    require(wait(5s), "daemon survived SIGKILL for 5 s");
  }

  bool wait(std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    while (!status_ && clock_type::now() < deadline) {
      io_.restart();
      io_.run_for(20ms);
    }
    return status_.has_value();
  }

  void pump() {
    io_.restart();
    io_.poll();
  }

 private:
  fs::path work_, socket_;
  boost::asio::io_context io_;
  std::unique_ptr<baton::os::process> proc_;
  std::optional<baton::os::exit_status> status_;
};

struct tally {
  std::map<std::string, int> events;  // by kind, including no-ops
  int skipped = 0;                    // worker events with no worker alive at that moment
  int jobs_completed = 0;
  int invariant_checks = 0;
  int memory_soft = 0, memory_hard = 0, crashed = 0, stopped = 0, completed_shards = 0;
};

class driver {
 public:
  driver(fs::path work, std::uint64_t seed) : work_(std::move(work)), rng_(seed) {}

  int run(int events) {
    const auto t0 = clock_type::now();
    reference_ = reference_weights();
    daemon_ = std::make_unique<daemon_process>(work_);
    submit();
    for (int i = 0; i < events; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(20, 200)));
      daemon_->pump();
      const int roll = pick(0, 99);
      std::string kind;
      if (roll < 35) {
        kind = "SIGKILL worker";
        signal_worker(SIGKILL);
      } else if (roll < 60) {
        kind = "SIGTERM worker";
        signal_worker(SIGTERM);
      } else if (roll < 75) {
        kind = "SIGKILL daemon + restart";
        restart_daemon();
      } else {
        kind = "quiet (leak runs on)";
      }
      ++tally_.events[kind];
      std::this_thread::sleep_for(100ms);
      check(false);
      if (last_state_ == "completed") finish_job();
    }
    // Let the last job run out undisturbed, then it must match too.
    const auto deadline = clock_type::now() + 120s;
    while (last_state_ != "completed" && clock_type::now() < deadline) {
      std::this_thread::sleep_for(200ms);
      daemon_->pump();
      check(false);
    }
    require(last_state_ == "completed", "job " + id_ + " did not complete after the schedule");
    finish_job(/*resubmit=*/false);
    count_exits();
    print_table(events, std::chrono::duration<double>(clock_type::now() - t0).count());
    return 0;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string reference_weights() {
    const auto dir = work_ / "reference";
    fs::create_directories(dir);
    std::ofstream(dir / "job.json") << job_document("reference").dump(2);
    auto r = baton::testing::run_process({BATON_EXE, "run", (dir / "job.json").string(),
                                          "--state-dir", (dir / "state").string(), "--json"},
                                         {}, dir / "baton.stderr", std::chrono::seconds(120));
    require(!r.timed_out && r.status.success(), "undisturbed reference run failed");
    const auto summary = json::parse(r.out);
    require(summary.at("state") == "completed", "reference run did not complete");
    return weights_of(summary.at("checkpoint_path").get<std::string>());
  }

  void submit() {
    auto r = control_client::call(daemon_->socket(), "POST", "/v1/jobs",
                                  {{"spec", job_document("chaos")}, {"base_dir", work_.string()}});
    require(r && r->status == 201, "submit failed");
    id_ = r->body.at("id").get<std::string>();
    last_step_ = 0;
    last_shard_start_ = 0;
    last_state_ = "queued";
  }

  json status() {
    auto r = control_client::call(daemon_->socket(), "GET", "/v1/jobs/" + id_, nullptr, 5s);
    require(bool(r), "[known] GET /v1/jobs/" + id_ + " failed");
    require(r->status == 200, "[known] job " + id_ + " unknown to the daemon");
    return r->body;
  }

  // Aims at the live worker, waiting up to 1.5 s for one (between shards there is none); then
  // waits a random part of a shard so the kill lands anywhere in it.
  void signal_worker(int sig) {
    const auto deadline = clock_type::now() + 1500ms;
    std::int64_t pid = 0;
    while (clock_type::now() < deadline) {
      const auto s = status();
      if (s.contains("live") && s["live"].is_object() && s["live"].value("pid", 0) > 0) {
        pid = s["live"]["pid"].get<std::int64_t>();
        break;
      }
      if (s.at("state") == "completed") break;
      std::this_thread::sleep_for(20ms);
      daemon_->pump();
    }
    if (pid == 0) {
      ++tally_.skipped;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pick(0, 200)));
    ::kill(static_cast<pid_t>(pid), sig);  // may have just ended: then nothing happens
  }

  void restart_daemon() {
    daemon_->kill_and_wait();
    const std::string prefix = "BATON_JOB_DIR=" + (work_ / "state").string();
    const auto deadline = clock_type::now() + 2s;
    auto left = processes_with_env(prefix);
    while (!left.empty() && clock_type::now() < deadline) {
      std::this_thread::sleep_for(20ms);
      left = processes_with_env(prefix);
    }
    require(left.empty(), "[no-orphan] " + std::to_string(left.size()) +
                              " worker process(es) outlived the SIGKILLed daemon by 2 s");
    daemon_.reset();
    daemon_ = std::make_unique<daemon_process>(work_);
  }

  void check(bool) {
    ++tally_.invariant_checks;
    const auto s = status();
    const std::string state = s.at("state");
    const auto step = s.at("checkpoint_step").get<std::int64_t>();
    require(state == "queued" || state == "running" || state == "backoff" || state == "completed",
            "[state] job " + id_ + " is " + state + ": " + s.value("diagnosis", ""));
    if (state == "completed") {
      require(step == s.at("total_steps").get<std::int64_t>(), "[state] completed short");
    }
    require(step >= last_step_, "[monotone] checkpoint_step went from " +
                                    std::to_string(last_step_) + " to " + std::to_string(step));
    std::int64_t prev_start = 0;
    for (const auto& sh : s.at("shards")) {
      const auto start = sh.at("start_step").get<std::int64_t>();
      require(start >= prev_start, "[monotone] a shard resumed at " + std::to_string(start) +
                                       " after one at " + std::to_string(prev_start));
      prev_start = start;
    }
    baton::supervisor::job_store store(baton::env::default_env(), work_ / "state");
    baton::protocol::checkpoint_store ckpts(baton::env::default_env(), store.checkpoint_dir(id_),
                                            1000);
    auto newest = ckpts.load_newest();
    require(bool(newest), "[verifies] " + (newest ? std::string() : newest.error().message));
    if (step > 0) {
      require(newest->has_value(),
              "[verifies] no checkpoint on disk for step " + std::to_string(step));
      require((*newest)->rejected.empty(),
              "[verifies] rejected: " +
                  ((*newest)->rejected.empty() ? std::string() : (*newest)->rejected[0]));
      require((*newest)->data.step() >= step, "[verifies] newest file is older than the record");
    }
    const auto workers = processes_with_env("BATON_JOB_DIR=" + store.job_dir(id_).string(), true);
    if (workers.size() > 1) {
      std::string who;
      for (const auto pid : workers) {
        who += "\n  " + read_text("/proc/" + std::to_string(pid) + "/stat").substr(0, 80);
      }
      throw violation("[one-worker] " + std::to_string(workers.size()) + " live workers for " +
                      id_ + who);
    }
    last_step_ = step;
    last_state_ = state;
    last_status_ = s;
  }

  void finish_job(bool resubmit = true) {
    const auto path = last_status_.at("checkpoint_path").get<std::string>();
    require(weights_of(path) == reference_,
            "[weights] job " + id_ + " ended with weights that differ from the undisturbed run");
    ++tally_.jobs_completed;
    count_exits();
    if (resubmit) submit();
  }

  void count_exits() {
    for (const auto& [cause, n] : last_status_.at("exits_by_cause").items()) {
      if (counted_.count(id_ + cause)) continue;
      counted_.insert(id_ + cause);
      const int v = n.get<int>();
      if (cause == "memory_soft") tally_.memory_soft += v;
      if (cause == "memory_hard") tally_.memory_hard += v;
      if (cause == "crashed") tally_.crashed += v;
      if (cause == "stopped") tally_.stopped += v;
      if (cause == "completed") tally_.completed_shards += v;
    }
  }

  void print_table(int events, double seconds) {
    std::cout << "| events | seconds | jobs completed (weights == undisturbed) | invariant "
                 "checks | worker events with no worker |\n|---|---|---|---|---|\n"
              << "| " << events << " | " << static_cast<int>(seconds) << " | "
              << tally_.jobs_completed << " | " << tally_.invariant_checks << " | "
              << tally_.skipped << " |\n\n| event | count |\n|---|---|\n";
    for (const auto& [k, v] : tally_.events) std::cout << "| " << k << " | " << v << " |\n";
    std::cout << "\n| worker exit cause (all jobs) | count |\n|---|---|\n"
              << "| completed | " << tally_.completed_shards << " |\n"
              << "| memory_soft (recycle) | " << tally_.memory_soft << " |\n"
              << "| memory_hard | " << tally_.memory_hard << " |\n"
              << "| crashed (our SIGKILL/SIGTERM) | " << tally_.crashed << " |\n"
              << "| stopped (daemon killed) | " << tally_.stopped << " |\n";
  }

  fs::path work_;
  std::mt19937_64 rng_;
  std::string reference_;
  std::unique_ptr<daemon_process> daemon_;
  std::string id_;
  std::int64_t last_step_ = 0;
  std::int64_t last_shard_start_ = 0;
  std::string last_state_;
  json last_status_;
  std::set<std::string> counted_;
  tally tally_;
};

}  // namespace

int main(int argc, char** argv) {
  int events = 100;
  std::uint64_t seed = 1;
  fs::path work = fs::temp_directory_path() / "baton-chaos";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--events" && i + 1 < argc) {
      events = std::stoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (a == "--work" && i + 1 < argc) {
      work = argv[++i];
    } else {
      std::cerr << "usage: baton_chaos [--events N] [--seed S] [--work DIR]\n";
      return 2;
    }
  }
  try {
    fs::remove_all(work);
    fs::create_directories(work);
    std::cout << "chaos: " << events << " events, seed " << seed << ", work " << work << "\n";
    return driver(fs::absolute(work), seed).run(events);
  } catch (const std::exception& e) {
    std::cerr << "chaos: VIOLATION (seed " << seed << "): " << e.what() << "\n"
              << "daemon log: " << (work / "daemon.log").string() << "\n";
    return 1;
  }
}
