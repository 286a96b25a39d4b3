#include "worker/worker_main.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "cli_docs/cli_docs.h"
#include "os/env.h"
#include "os/stop_signal.h"
#include "os/system.h"
#include "protocol/checkpoint_store.h"
#include "protocol/job_spec.h"
#include "protocol/messages.h"
#include "protocol/version.h"
#include "worker/dataset.h"
#include "worker/parallel.h"
#include "worker/trainer.h"

namespace baton::worker {

namespace {

using clock_type = std::chrono::steady_clock;

void log(const std::string& text) {
  std::fprintf(stderr, "baton-worker: %s\n", text.c_str());
  std::fflush(stderr);
}

// stdout carries protocol lines only, each flushed at once so the supervisor sees it.
void send(const protocol::worker_message& m) {
  static std::mutex mu;
  const std::string line = protocol::encode(m) + "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

int fail(int code, const std::string& message) {
  log("error: " + message);
  send(protocol::error_msg{message});
  return code;
}

// What the stdin reader tells a worker started ahead that waits for its turn.
struct turn_signal {
  std::mutex mu;
  std::condition_variable cv;
  bool resume = false;
  bool closed = false;  // stdin's end
};

turn_signal& turn() {
  static turn_signal t;
  return t;
}

// Reads supervisor lines until end of input. Only `stop` means stop: a closed stdin (a
// supervisor that never writes, a test harness) is not a request.
void start_stdin_reader() {
  std::thread([] {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      auto m = protocol::decode_supervisor_message(line);
      if (!m) {
        log("ignoring bad line on stdin: " + m.error().message);
        continue;
      }
      if (std::holds_alternative<protocol::stop_msg>(*m)) {
        log("stop requested on stdin; finishing the current step");
        os::request_stop();
        turn().cv.notify_all();
      } else if (std::holds_alternative<protocol::resume_msg>(*m)) {
        std::lock_guard<std::mutex> lock(turn().mu);
        turn().resume = true;
        turn().cv.notify_all();
      }
    }
    log("stdin closed (not a stop request; training goes on)");
    std::lock_guard<std::mutex> lock(turn().mu);
    turn().closed = true;
    turn().cv.notify_all();
  }).detach();
}

// A worker started ahead waits here, set up, until the supervisor says `resume` (true), or
// asks it to stop or goes away (false: it has trained nothing, so it has nothing to save).
// SIGTERM sets the stop flag from a signal handler, which cannot notify: hence the short polls.
bool wait_for_turn() {
  auto& t = turn();
  std::unique_lock<std::mutex> lock(t.mu);
  while (!t.resume && !t.closed && !os::stop_requested()) {
    t.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
  return t.resume && !os::stop_requested();
}

// Fault injection: memory that is allocated, written and never freed, like a leaking framework.
class leaker {
 public:
  explicit leaker(double mib_per_step) : per_step_(mib_per_step * 1048576.0) {}
  void step() {
    if (per_step_ <= 0) return;
    owed_ += per_step_;
    const auto n = static_cast<std::size_t>(owed_);
    if (n == 0) return;
    owed_ -= static_cast<double>(n);
    auto block = std::make_unique<char[]>(n);
    std::memset(block.get(), 0x5a, n);  // touched, so it is resident
    blocks_.push_back(std::move(block));
  }

 private:
  double per_step_;
  double owed_ = 0;
  std::vector<std::unique_ptr<char[]>> blocks_;
};

[[noreturn]] void hang(std::int64_t step) {
  log("debug.hang_at_step: hanging at step " + std::to_string(step) + " (ignoring stop requests)");
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

protocol::progress_msg progress(const trainer& t, const step_outcome* last, double samples_per_sec,
                                std::int64_t shard_end_step) {
  protocol::progress_msg p;
  p.shard_end_step = shard_end_step;
  p.step = t.step();
  p.total_steps = t.geometry().total_steps;
  if (last != nullptr) {
    p.epoch = last->epoch;
    p.loss = last->epoch_loss;
    p.metrics["accuracy"] = last->epoch_accuracy;
    if (last->val_loss) p.metrics["val_loss"] = *last->val_loss;
    if (last->val_accuracy) p.metrics["val_accuracy"] = *last->val_accuracy;
  } else {
    p.epoch = t.epoch();
    p.loss = t.epoch_loss();  // NaN (sent as null) before the epoch's first step
    if (!std::isnan(t.epoch_accuracy())) p.metrics["accuracy"] = t.epoch_accuracy();
  }
  p.samples_per_sec = samples_per_sec;
  return p;
}

// `began`: when the worker sent hello, where its set-up's time is counted from.
int run(worker_options opt, clock_type::time_point began) {
  os::env& e = os::env::default_env();
  // Checkpoint messages carry absolute paths: the supervisor may run in another folder.
  std::error_code ec;
  auto absolute_dir = std::filesystem::absolute(opt.checkpoint_dir, ec);
  if (ec) {
    return fail(exit_bad_config,
                "--checkpoint-dir " + opt.checkpoint_dir.string() + ": " + ec.message());
  }
  opt.checkpoint_dir = absolute_dir.lexically_normal();
  auto spec = protocol::load_job_spec(e, opt.job_file);
  if (!spec) return fail(exit_bad_config, spec.error().message);
  if (auto ok = protocol::check_job_files(e, *spec); !ok) {
    return fail(exit_bad_config, ok.error().message);
  }
  if (auto ok = protocol::check_builtin_sections(*spec); !ok) {
    return fail(exit_bad_config, ok.error().message);
  }
  const int threads = set_thread_count(opt.threads.value_or(spec->training->threads));

  if (auto ok = e.create_dirs(opt.checkpoint_dir); !ok) {
    return fail(exit_runtime_error, ok.error().message);
  }
  protocol::checkpoint_store store(e, opt.checkpoint_dir, spec->checkpoints.keep);
  // With a team of two or more, the save and the restore hash on a second thread of it while
  // the first writes or reads: on two cores a 48 MiB state's hash (~5 ms) then costs no time.
  const protocol::side_by_side both = run_side_by_side;
  const protocol::side_by_side* hash_beside = threads >= 2 ? &both : nullptr;
  if (hash_beside) store.set_side_by_side(both);
  // Checked in bounded chunks and left open, never held: the restore reads each tensor straight
  // into the model, so a resume holds the state once, and its hash of those very bytes is the
  // digest check, so the file is read once. Found before the model is made, so a resume skips the
  // initial weights (and the zeroing) that the restore would overwrite.
  // Started ahead, the checkpoint it resumes from is still being written: the data and the model
  // come first, with every page of the state faulted in (a third of a resume's time on a fresh
  // process), and the checkpoint is looked for only once the supervisor says `resume`.
  constexpr std::size_t chunk = 1 << 20;
  result<std::optional<protocol::opened_checkpoint>> loaded = std::nullopt;
  if (!opt.start_ahead) {
    loaded = store.open_newest(chunk, protocol::digest_check::on_read);
    if (!loaded) return fail(exit_runtime_error, loaded.error().message);
  }

  auto data = load_dataset(e, *spec->data, spec->training->loss, spec->model->layers.back().units);
  if (!data) return fail(exit_bad_config, data.error().message);
  const auto init = opt.start_ahead ? initial_weights::faulted_in_for_restore
                    : *loaded       ? initial_weights::left_for_restore
                                    : initial_weights::from_spec;
  auto made = trainer::create(*spec, std::move(*data), e, init);
  if (!made) return fail(exit_bad_config, made.error().message);
  trainer& t = **made;
  const auto& g = t.geometry();
  const auto set_up = clock_type::now();
  auto turn = set_up;
  if (opt.start_ahead) {
    if (!wait_for_turn()) {
      log("started ahead, and stopped before its turn: nothing trained, nothing to save");
      return exit_stopped;
    }
    turn = clock_type::now();
    loaded = store.open_newest(chunk, protocol::digest_check::on_read);
    if (!loaded) return fail(exit_runtime_error, loaded.error().message);
    // Only a job with a checkpoint has a worker started ahead: it follows one that saved.
    if (!*loaded) {
      return fail(exit_runtime_error, "started ahead to resume, but " +
                                          opt.checkpoint_dir.string() + " holds no checkpoint");
    }
  }

  std::optional<std::int64_t> resumed_step;
  std::filesystem::path resumed_path;
  // A file whose bytes fail their digest as they land is passed over for the next older one, as
  // a file that fails to index is; the restore writes every tensor again from that one.
  std::vector<std::filesystem::path> corrupt;
  std::string corrupt_reasons;
  while (*loaded) {
    for (const auto& r : (*loaded)->rejected) log("rejected checkpoint " + r);
    resumed_path = (*loaded)->path;
    os::readable_file& file = *(*loaded)->file;
    const auto read = [&](std::uint64_t offset, std::span<char> out) {
      return file.read_into(offset, out);
    };
    auto ok = t.restore((*loaded)->index, read, resumed_path.string(), hash_beside);
    loaded->reset();  // closes the file
    if (ok) {
      resumed_step = t.step();
      break;
    }
    if (ok.error().code != errc::corrupt_data) return fail(exit_bad_config, ok.error().message);
    log("rejected checkpoint " + ok.error().message);
    corrupt.push_back(resumed_path);
    corrupt_reasons += "; " + ok.error().message;
    loaded = store.open_newest(chunk, protocol::digest_check::on_read, corrupt);
    if (!loaded) return fail(exit_runtime_error, loaded.error().message + corrupt_reasons);
    if (!*loaded) break;  // cannot happen: the corrupt files are still there
  }
  if (!resumed_step && !corrupt.empty()) {
    return fail(exit_runtime_error,
                "no valid checkpoint in " + opt.checkpoint_dir.string() + corrupt_reasons);
  }
  std::int64_t boundary = shard_boundary(t.step(), g);
  if (opt.max_steps) boundary = std::min(boundary, t.step() + *opt.max_steps);
  log("job " + spec->name + ": " +
      (resumed_step ? "resuming from " + resumed_path.string() : std::string("starting fresh")) +
      " at step " + std::to_string(t.step()) + " of " + std::to_string(g.total_steps) +
      ", shard ends at step " + std::to_string(boundary) + ", " + std::to_string(threads) +
      " threads");

  leaker leak(spec->debug.leak_mib_per_step);
  const std::int64_t first_step = t.step();
  const auto restored = clock_type::now();
  std::optional<clock_type::time_point> first_step_done;
  // The shard's first and last `edge` steps, timed apart: a switch slows the steps around it
  // (the next worker's set-up beside the last ones, the supervisor's check of the checkpoint
  // and the old worker's exit beside the first), and shard_switch_bench counts that as the
  // switch's, not as training. Only in a shard long enough to have a middle left.
  constexpr std::int64_t edge = 32;
  const bool timed_edges = boundary - first_step >= 3 * edge;
  std::optional<clock_type::time_point> head_done, tail_began;
  send(progress(t, nullptr, 0.0, boundary));
  auto last_report = clock_type::now();
  std::int64_t samples_since_report = 0;
  bool stopped = false;
  while (t.step() < boundary) {
    if (os::stop_requested()) {
      stopped = true;
      break;
    }
    if (spec->debug.hang_at_step && *spec->debug.hang_at_step == t.step()) hang(t.step());
    if (spec->debug.crash_at_step && *spec->debug.crash_at_step == t.step()) {
      log("debug.crash_at_step: aborting at step " + std::to_string(t.step()));
      std::abort();
    }
    const step_outcome out = t.run_step();
    const auto now = clock_type::now();
    if (!first_step_done) first_step_done = now;
    if (timed_edges && t.step() == first_step + edge) head_done = now;
    if (timed_edges && t.step() == boundary - edge) tail_began = now;
    leak.step();
    samples_since_report += out.batch_size;
    const double secs = std::chrono::duration<double>(now - last_report).count();
    // Ten reports a second: often enough for the supervisor to learn how many steps a worker
    // gets through before its memory budget, cheap enough (one short line) to never matter.
    if (out.epoch_end || secs >= 0.1 || t.step() == boundary) {
      send(progress(t, &out, secs > 0 ? static_cast<double>(samples_since_report) / secs : 0.0,
                    boundary));
      last_report = now;
      samples_since_report = 0;
    }
  }
  if (stopped) log("stopping at step " + std::to_string(t.step()) + " on request");
  const auto trained = clock_type::now();

  // A stop before the first step has nothing new to save: announce the checkpoint we resumed.
  std::filesystem::path path = resumed_path;
  std::optional<std::string> digest;  // of the bytes the save wrote: no need to read them back
  if (!resumed_step || *resumed_step != t.step()) {
    auto saved = store.save(t.snapshot_view());
    if (saved) {
      path = saved->path;
      digest = std::move(saved->digest);
    } else if (saved.error().code == errc::saved_but_cleanup_failed) {
      log("warning: " + saved.error().message);  // durable; only pruning failed
      path = store.path_for_step(t.step());
    } else {
      return fail(exit_runtime_error, saved.error().message);
    }
  }
  if (!digest) {
    // Not written by this process (or its save's digest was lost with a cleanup error): read
    // it back in chunks, since holding it whole would double the peak memory.
    auto read_back = store.verify(path);
    if (!read_back) return fail(exit_runtime_error, read_back.error().message);
    digest = std::move(*read_back);
  }
  send(protocol::checkpoint_msg{path.string(), t.step(), *digest});
  send(protocol::done_msg{t.step(), t.finished()});
  // Where the shard's time went, for whoever weighs shorter shards against what each one costs
  // (a switch is the save, the next worker's set-up, unless started ahead, and its restore).
  const auto ms = [](clock_type::time_point a, clock_type::time_point b) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count()) +
           " ms";
  };
  std::string timings = "set-up " + ms(began, set_up);
  if (opt.start_ahead) timings += ", waited " + ms(set_up, turn) + " for its turn";
  if (resumed_step) timings += ", restore " + ms(turn, restored);
  if (first_step_done) {
    const auto in_ms = [](clock_type::time_point a, clock_type::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    char steps[160];
    std::snprintf(steps, sizeof steps, ", %lld steps in %.3f s (the first %.1f ms",
                  static_cast<long long>(t.step() - first_step),
                  std::chrono::duration<double>(trained - restored).count(),
                  in_ms(restored, *first_step_done));
    timings += steps;
    if (head_done && tail_began && t.step() == boundary) {
      std::snprintf(steps, sizeof steps, "; the first %lld in %.1f ms, the last %lld in %.1f ms",
                    static_cast<long long>(edge), in_ms(restored, *head_done),
                    static_cast<long long>(edge), in_ms(*tail_began, trained));
      timings += steps;
    }
    timings += ")";
  }
  timings += ", save " + ms(trained, clock_type::now());
  log("wrote " + path.string() + (t.finished() ? "; job complete" : "") + " (" + timings + ")");
  return stopped ? exit_stopped : exit_done;
}

}  // namespace

std::optional<std::string> process_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

result<command_line> parse_command_line(int argc, const char* const* argv,
                                        const env_lookup& lookup) {
  CLI::App app("baton-worker: trains one shard of a baton job and exits (see protocol/README.md)",
               "baton-worker");
  worker_options o;
  int threads = -1;
  app.add_option("--job", o.job_file,
                 std::string("job spec file (default: $") + job_file_env + ")");
  app.add_option(
      "--checkpoint-dir", o.checkpoint_dir,
      std::string("folder of this job's checkpoints (default: $") + checkpoint_dir_env + ")");
  auto* t =
      app.add_option("--threads", threads, "threads (0: one per core); overrides training.threads")
          ->check(CLI::Range(0, 4096));
  std::int64_t max_steps = 0;
  auto* m = app.add_option("--max-steps", max_steps,
                           std::string("stop after this many steps in this process (default: $") +
                               max_steps_env + ")")
                ->check(CLI::PositiveNumber);
  // Hidden (empty group): the build writes baton-worker(1) from this very app with it.
  bool man = false;
  app.add_flag("--generate-man", man, "print the man page")->group("");
  try {
    app.parse(argc, argv);
    if (man) {
      cli_docs::man_info info;
      info.version = "baton-worker " + std::string(protocol::version());
      info.manual = "baton manual";
      info.footer =
          "0 shard or job done, 1 runtime error, 2 bad command line, job, data or checkpoint, "
          "3 stopped on request (checkpoint written).";
      info.see_also = {"baton(1)"};
      return command_line{std::nullopt, cli_docs::man_page(app, info)};
    }
  } catch (const CLI::CallForHelp&) {
    return command_line{std::nullopt, app.help()};
  } catch (const CLI::ParseError& e) {
    return make_error(std::string("command line: ") + e.what() +
                      " (usage: baton-worker --job FILE " + "--checkpoint-dir DIR [--threads N])");
  }
  if (t->count() > 0) o.threads = threads;
  if (m->count() > 0) {
    o.max_steps = max_steps;
  } else if (auto v = lookup(max_steps_env); v && !v->empty()) {
    std::int64_t n = 0;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || ptr != v->data() + v->size() || n < 1) {
      return make_error(std::string(max_steps_env) + ": expected a positive integer, got \"" + *v +
                        "\"");
    }
    o.max_steps = n;
  }
  if (auto v = lookup(start_ahead_env); v && !v->empty()) {
    if (*v != "1" && *v != "0") {
      return make_error(std::string(start_ahead_env) + ": expected 1 or 0, got \"" + *v + "\"");
    }
    o.start_ahead = *v == "1";
  }
  const auto fallback = [&](std::filesystem::path& p, const char* flag, const char* var) -> status {
    if (!p.empty()) return {};
    auto v = lookup(var);
    if (!v || v->empty()) {
      return make_error(std::string("command line: ") + flag + " is required (or set " + var + ")");
    }
    p = *v;
    return {};
  };
  if (auto ok = fallback(o.job_file, "--job", job_file_env); !ok) return ok.error();
  if (auto ok = fallback(o.checkpoint_dir, "--checkpoint-dir", checkpoint_dir_env); !ok) {
    return ok.error();
  }
  return command_line{o, {}};
}

int run_worker(int argc, char** argv) {
  try {
    auto cl = parse_command_line(argc, argv);
    if (cl && !cl->options) {
      std::fputs(cl->help.c_str(), stdout);
      return exit_done;
    }
    // Before hello, so a SIGTERM that races start-up still ends in a clean stop.
    os::install_stop_handlers();
    const auto began = clock_type::now();
    send(protocol::hello_msg{protocol::protocol_version, os::current_pid(),
                             "baton-worker " + std::string(protocol::version())});
    if (!cl) return fail(exit_bad_config, cl.error().message);
    start_stdin_reader();
    return run(*cl->options, began);
  } catch (const std::bad_alloc&) {
    return fail(exit_runtime_error, "out of memory");
  } catch (const std::exception& e) {
    return fail(exit_runtime_error, std::string("internal error: ") + e.what());
  }
}

}  // namespace baton::worker
