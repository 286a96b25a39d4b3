#include "supervisor/run_command.h"

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <iostream>

#include "os/env.h"
#include "os/process.h"
#include "os/state_lock.h"
#include "os/system.h"
#include "protocol/job_overrides.h"
#include "protocol/job_spec.h"
#include "supervisor/control_token.h"
#include "supervisor/dashboard_routes.h"
#include "supervisor/http_listener.h"
#include "supervisor/job_history.h"
#include "supervisor/job_runner.h"
#include "supervisor/job_store.h"
#include "supervisor/process_launcher.h"
#include "supervisor/run_api.h"
#include "supervisor/run_report.h"

namespace baton::supervisor {

namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace baton::supervisor;

fs::path find_worker_executable(os::env& e) {
  if (auto w = os::get_env("BATON_WORKER"); w && !w->empty()) return *w;
  const auto self = os::executable_path();
  if (self.empty()) return {};
  for (const auto& candidate : {self.parent_path() / "baton-worker",
                                self.parent_path().parent_path() / "worker" / "baton-worker"}) {
    if (e.file_exists(candidate)) return candidate;
  }
  return {};
}

int run_job(const run_options& o, cli_context& ctx, process_launcher& launcher) {
  auto& e = ctx.environment;
  std::vector<protocol::job_override> sets;
  for (const auto& arg : o.sets) {
    auto parsed = protocol::parse_override(arg);
    if (!parsed) {
      ctx.err << parsed.error().message << "\n";
      return exit_invalid;
    }
    sets.push_back(std::move(*parsed));
  }
  std::optional<http_listen_address> dashboard_at;
  if (o.dashboard) {
    auto where = parse_http_listen(o.dashboard_listen);
    if (!where) {
      ctx.err << "--dashboard-listen: " << where.error().message << "\n";
      return exit_invalid;
    }
    dashboard_at = *where;
  }
  auto spec = protocol::load_job_spec(e, o.config, sets);
  if (!spec) {
    ctx.err << spec.error().message << "\n";
    return exit_invalid;
  }
  if (auto s = protocol::check_job_files(e, *spec); !s) {
    ctx.err << s.error().message << "\n";
    return exit_invalid;
  }
  if (auto s = protocol::check_job_limits(*spec, protocol::this_machine()); !s) {
    ctx.err << s.error().message << "\n";
    return exit_invalid;
  }
  // Absolute: workers run in the job's folder, where a relative path would name nothing.
  const fs::path worker =
      o.worker.empty() ? find_worker_executable(e) : fs::absolute(fs::path(o.worker));
  if (!spec->worker.command && (worker.empty() || !e.file_exists(worker))) {
    ctx.err << "cannot find baton-worker (looked next to baton and in the build tree); "
               "set BATON_WORKER or pass --worker PATH\n";
    return exit_failure;
  }

  // Absolute, like the worker: workers run in the job's folder and are handed paths in it.
  job_store store(
      e, o.state_dir.empty() ? os::default_state_dir() : fs::absolute(fs::path(o.state_dir)));
  if (auto s = store.open(); !s) {
    ctx.err << s.error().message << "\n";
    return exit_failure;
  }
  // Held until we return: no daemon may start on this state directory while the job runs here.
  auto& locker = o.locker ? *o.locker : os::os_state_locker();
  auto lock = locker.lock(store.state_dir(), "baton run");
  if (!lock) {
    const auto& why = lock.error();
    if (why.held_by_other && why.holder && why.holder->role == "baton serve") {
      ctx.err << "state directory " << store.state_dir().string()
              << " is owned by the baton daemon (pid " << why.holder->pid
              << "): submit the job to it with `baton submit " << o.config
              << "`, or stop the daemon first\n";
    } else {
      ctx.err << why.why.message << "\n";
    }
    return exit_failure;
  }
  if (auto swept = store.sweep_incomplete(); !swept) {
    ctx.err << swept.error().message << "\n";
    return exit_failure;
  } else {
    for (const auto& gone : *swept) {
      ctx.err << "warning: removed the half-written job folder " << store.job_dir(gone).string()
              << " (a submit or run cut short before it was recorded)\n";
    }
  }
  const std::string id = spec->name;
  if (o.fresh && store.exists(id)) {
    if (auto s = store.remove(id); !s) {
      ctx.err << s.error().message << "\n";
      return exit_failure;
    }
  }
  job_record record;
  if (store.exists(id)) {
    auto stored = store.load_spec(id);
    if (!stored) {
      ctx.err << stored.error().message << "\n";
      return exit_failure;
    }
    if (protocol::to_json(*stored) != protocol::to_json(*spec)) {
      ctx.err << "job \"" << id << "\" in " << store.state_dir().string()
              << " was started from a different config; run with --fresh to discard its state, "
                 "or give the job another name\n";
      return exit_invalid;
    }
    auto loaded = store.load(id);
    if (!loaded) {
      ctx.err << loaded.error().message << "\n";
      return exit_failure;
    }
    for (const auto& why : loaded->rejected) ctx.err << "warning: " << why << "\n";
    record = std::move(loaded->record);
    // A run killed outright left its job running with an open shard: queued again, the shard
    // closed. A paused one (Ctrl-C) resumes: running the command again is the request.
    const bool open = !record.shards.empty() && !record.shards.back().cause;
    for (const event& ev : {event{ev::recovered{open}}, event{ev::resume_requested{}}}) {
      if (auto out = feed_job_at_rest(e, store, record, ev); !out.saved) {
        ctx.err << "warning: " << out.saved.error().message << "\n";
      }
    }
    if (is_terminal(record.state) && !o.json) {
      ctx.err << "job " << id << " already " << to_string(record.state) << " in "
              << store.state_dir().string() << "; add --fresh to run it again\n";
    }
    if (!o.json && record.checkpoint_step > 0 && !is_terminal(record.state)) {
      ctx.err << "resuming job " << id << " from step " << record.checkpoint_step << "\n";
    }
  } else {
    auto created = store.create(*spec, protocol::planned_total_steps(*spec), id);
    if (!created) {
      ctx.err << created.error().message << "\n";
      return exit_failure;
    }
    record = std::move(*created);
  }

  asio::io_context io;
  if (o.become_subreaper) {
    if (auto s = os::become_subreaper(); !s) ctx.err << "warning: " << s.error().message << "\n";
  }
  // As the daemon holds its workers (the state dir's lock is ours): in a cgroup where one is
  // writable, so nothing a worker starts outlives the run, and worker.preload can contain its
  // shards. Only for real workers: a test's fake launcher starts no process to hold.
  struct containment_end {
    bool owned = false;
    ~containment_end() {
      if (owned) os::end_containment();
    }
  } containment;
  if (&launcher == &os_process_launcher()) {
    std::string warning;
    const auto c = set_up_containment(store.state_dir(), warning);
    containment.owned = true;
    if (!warning.empty()) ctx.err << "warning: " << warning << "\n";
    if (c.leftovers_killed > 0) {
      ctx.err << "warning: killed " << c.leftovers_killed
              << " process(es) an earlier run's workers left behind\n";
    }
  }
  const bool tty = !o.json && os::stdout_is_terminal();
  const auto started = std::chrono::steady_clock::now();
  const std::int64_t start_step = record.checkpoint_step;
  std::int64_t last_epoch_printed = -1;
  std::size_t last_shard_printed = 0;
  auto last_draw = std::chrono::steady_clock::time_point{};

  std::unique_ptr<job_runner> runner;
  runner_options ro;
  ro.worker_exe = worker;
  ro.on_rest = [&] { io.stop(); };
  ro.on_change = [&] {
    if (o.json || !runner) return;
    const auto& r = runner->record();
    const auto& l = runner->live();
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - started).count();
    progress_view v{r, l, spec->memory.soft_limit_mib.value_or(0),
                    spec->memory.hard_limit_mib.value_or(0),
                    elapsed > 1 ? static_cast<double>(l.step - start_step) / elapsed : 0.0};
    v.colour = ctx.colour_out();
    if (tty) {
      if (now - last_draw < std::chrono::milliseconds(200)) return;
      last_draw = now;
      ctx.out << "\r\033[K" << format_progress_line(v) << std::flush;
    } else if (l.pid != 0 &&
               (l.epoch != last_epoch_printed || r.shards.size() != last_shard_printed)) {
      last_epoch_printed = l.epoch;
      last_shard_printed = r.shards.size();
      ctx.out << format_progress_line(v) << "\n" << std::flush;
    }
  };
  ro.on_event = [&](const std::string& m) {
    if (o.json) return;
    if (tty) ctx.out << "\r\033[K";
    ctx.out << m << "\n" << std::flush;
  };
  // The same history a daemon keeps, in the job's folder: a job run here and later shown by a
  // daemon (or the dashboard below) has its whole curve.
  std::unique_ptr<job_history> history;
  if (auto h = job_history::open(e, job_history::file_in(store.job_dir(id)))) {
    for (const auto& n : h->load_notes()) ctx.err << "warning: " << n << "\n";
    history = std::make_unique<job_history>(std::move(*h));
  } else {
    ctx.err << "warning: the job runs without a history: " << h.error().message << "\n";
  }
  ro.history = history.get();
  runner = std::make_unique<job_runner>(io, e, launcher, store, std::move(record), *spec, ro);

  // `--dashboard`: the daemon's page, served for this one job, read-only, behind a new token.
  std::unique_ptr<run_api> api;
  std::unique_ptr<http_listener> http;
  if (dashboard_at) {
    auto token = make_control_token();
    if (!token) {
      ctx.err << "dashboard token: " << token.error().message << "\n";
      return exit_failure;
    }
    run_view view{[&]() -> const job_record& { return runner->record(); },
                  [&]() -> const live_status* { return &runner->live(); },
                  spec->memory.soft_limit_mib, spec->memory.hard_limit_mib, history.get()};
    api = std::make_unique<run_api>(e, store, std::move(view));
    http = std::make_unique<http_listener>(
        io, *api, *dashboard_at,
        [&](const std::string& m) { ctx.err << "dashboard: " << m << "\n"; }, *token);
    if (auto s = http->start(); !s) {
      ctx.err << s.error().message << "\n";
      return exit_failure;
    }
    ctx.err << "dashboard on " << http->dashboard_url() << "\n" << std::flush;
  }

  // First Ctrl-C: checkpoint and stop (the job rests as paused; run again to resume).
  // Second: stop at once; the newest checkpoint is kept either way.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  int interrupts = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        if (++interrupts == 1) {
          if (!o.json)
            ctx.err << "\nstopping: the worker checkpoints first (Ctrl-C again to kill)\n";
          runner->pause("stopped by the user");
          signals.async_wait(on_signal);
        } else {
          io.stop();
        }
      };
  signals.async_wait(on_signal);

  runner->start();
  if (!runner->at_rest()) io.run();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const job_record final_record = runner->record();
  if (http) http->stop();
  runner.reset();  // a worker still running after a second Ctrl-C is killed here
  if (tty) ctx.out << "\r\033[K";
  const auto log_info = worker_log_view(e, store, final_record);
  if (o.json) {
    ctx.out << summary_json(final_record, wall, &log_info).dump(2) << "\n";
  } else {
    ctx.out << format_summary(final_record, wall, ctx.colour_out());
  }
  switch (final_record.state) {
    case job_state::completed:
      return exit_ok;
    case job_state::paused:
    case job_state::queued:
    case job_state::running:
    case job_state::waiting:
    case job_state::backoff:
      return 130;  // interrupted: run the same command again to resume
    default:
      return exit_failure;
  }
}

void add_run_command(CLI::App& app, cli_context& ctx) {
  auto opts = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand(
      "run", "Run one job in the foreground (resumes it if it was stopped before)");
  cmd->add_option("config", opts->config, "Job file (JSON)")->required();
  cmd->add_option("--state-dir", opts->state_dir,
                  "Where job state lives (default: $BATON_STATE_DIR, $XDG_STATE_HOME/baton or "
                  "~/.local/state/baton)");
  cmd->add_option("--worker", opts->worker, "The baton-worker executable to run shards with");
  cmd->add_flag("--json", opts->json, "Print the summary as one JSON object, no progress");
  cmd->add_flag("--fresh", opts->fresh, "Discard this job's saved state and start over");
  cmd->add_flag("--dashboard", opts->dashboard,
                "Serve the web dashboard for this run on loopback and print its URL");
  cmd->add_option("--dashboard-listen", opts->dashboard_listen,
                  "Where --dashboard listens: a loopback HOST:PORT (port 0: any free one)")
      ->capture_default_str();
  cmd->add_option("--set", opts->sets,
                  "Override a field of the job file, typed by the spec: PATH=VALUE, e.g. "
                  "training.optimizer.learning_rate=0.01 (repeatable)")
      ->take_all();
  cmd->callback([opts, &ctx] { ctx.exit_code = run_job(*opts, ctx, os_process_launcher()); });
}

}  // namespace baton::supervisor
