#include "supervisor/daemon.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>

#include "os/private_file.h"
#include "os/process.h"
#include "os/system.h"
#include "protocol/job_spec.h"
#include "protocol/version.h"
#include "supervisor/control_server.h"
#include "supervisor/control_token.h"
#include "supervisor/daemon_impl.h"
#include "supervisor/dashboard_routes.h"
#include "supervisor/job_access.h"
#include "supervisor/job_log.h"
#include "supervisor/job_status.h"
#include "supervisor/job_store.h"

namespace baton::supervisor {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A worker that was running when the previous daemon died left a shard with no exit cause; it
// was killed with its supervisor (PDEATHSIG), which the machine closes as a stop.
bool shard_open(const job_record& r) { return !r.shards.empty() && !r.shards.back().cause; }

}  // namespace

bool created_before(const job_record& a, const job_record& b) {
  return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.id < b.id;
}

void daemon::impl::log(log_level level, const std::string& message) {
  if (level > options.settings.level) return;
  if (options.hooks.log) {
    options.hooks.log(level, message);
    return;
  }
  std::cerr << "baton: " << to_string(level) << ": " << message << std::endl;
}

rest_outcome daemon::impl::feed(job_record& r, const event& ev) {
  auto out = feed_job_at_rest(e, store, r, ev);
  if (!out.saved) {
    log(log_level::error, "job " + r.id + ": cannot save its record: " + out.saved.error().message);
  }
  if (r.state != job_state::queued)
    queue.erase(std::remove(queue.begin(), queue.end(), r.id), queue.end());
  return out;
}

status daemon::impl::recover() {
  // A submit cut short by a crash was never acknowledged: it goes, and is not a failed job.
  auto swept = store.sweep_incomplete();
  if (!swept) return swept.error();
  for (const auto& id : *swept) {
    log(log_level::warning, "job " + id + ": removed a half-written submit (no record; the " +
                                "daemon stopped before acknowledging it)");
  }
  // Record and spec writes a SIGKILL cut short (the folder's state lock says none runs now).
  auto temps = store.sweep_temp_files();
  if (!temps) return temps.error();
  if (*temps > 0) {
    log(log_level::info, "removed " + std::to_string(*temps) + " temp file(s) of writes cut short");
  }
  auto ids = store.list();
  if (!ids) return ids.error();
  std::vector<std::string> resume;
  for (const auto& id : *ids) {
    job_entry entry;
    auto spec = store.load_spec(id);
    auto loaded = store.load(id);
    auto& r = entry.record;
    if (!loaded) {
      // Never dropped silently: the job stays listed, failed, with the reasons.
      log(log_level::error, "job " + id + ": " + loaded.error().message);
      r.id = id;
      r.name = spec ? spec->name : id;
      r.created_ms = r.updated_ms = 0;
      feed(r, ev::unloadable{"job record does not verify: " + loaded.error().message});
      jobs.emplace(id, std::move(entry));
      continue;
    }
    for (const auto& why : loaded->rejected) {
      log(log_level::warning, "job " + id + ": skipped a damaged record slot: " + why);
    }
    r = std::move(loaded->record);
    if (!spec) {
      if (!is_terminal(r.state)) log(log_level::error, "job " + id + ": " + spec.error().message);
      feed(r, ev::unloadable{"job spec does not load: " + spec.error().message, shard_open(r)});
      jobs.emplace(id, std::move(entry));
      continue;
    }
    entry.spec = std::move(*spec);
    if (feed(r, ev::recovered{shard_open(r)}).wants_slot) resume.push_back(id);
    jobs.emplace(id, std::move(entry));
  }
  std::sort(resume.begin(), resume.end(), [this](const std::string& a, const std::string& b) {
    return created_before(jobs.at(a).record, jobs.at(b).record);
  });
  queue.assign(resume.begin(), resume.end());
  std::size_t paused = 0, failed = 0;
  for (const auto& [id, j] : jobs) {
    paused += j.record.state == job_state::paused;
    failed += j.record.state == job_state::failed;
  }
  log(log_level::info, "recovered " + std::to_string(jobs.size()) + " jobs from " +
                           store.state_dir().string() + ": " + std::to_string(queue.size()) +
                           " to run, " + std::to_string(paused) + " paused, " +
                           std::to_string(failed) + " failed");
  return {};
}

void daemon::impl::publish_status() {
  std::string text =
      std::to_string(running) + " running, " + std::to_string(queue.size()) + " queued";
  if (stopping) text = "stopping: " + text;
  if (const auto it = jobs.find(newest_progress_id); it != jobs.end() && it->second.runner) {
    const auto& l = it->second.runner->live();
    if (l.step > 0) {
      char loss[32];
      std::snprintf(loss, sizeof loss, "%.4g", l.loss);
      text += "; " + newest_progress_id + " step " + std::to_string(l.step) +
              (l.total_steps > 0 ? "/" + std::to_string(l.total_steps) : std::string()) + " loss " +
              loss;
    }
  }
  if (text == last_status) return;
  last_status = text;
  if (options.hooks.on_status) options.hooks.on_status(text);
}

void daemon::impl::start_next() {
  while (!stopping && running < static_cast<std::size_t>(options.settings.max_workers) &&
         !queue.empty()) {
    const std::string id = queue.front();
    queue.pop_front();
    start_runner(id);
  }
  publish_status();
}

void daemon::impl::start_runner(const std::string& id) {
  auto& j = jobs.at(id);
  auto run_as = worker_credentials(options.settings, j.record, daemon_uid);
  if (!run_as) {
    log(log_level::error, "job " + id + ": " + run_as.error().message);
    feed(j.record, ev::unloadable{"cannot run: " + run_as.error().message});
    publish_status();
    return;
  }
  if (*run_as) {
    // Again at every start: a crash between a submit's record and its hand-over, or a job from
    // before system mode, must not leave its workers a folder they cannot write.
    job_owner to{(*run_as)->uid, (*run_as)->gid, {}};
    if (auto s = store.hand_over(id, to); !s) {
      log(log_level::warning, "job " + id + ": cannot give its folder to uid " +
                                  std::to_string(to.uid) + ": " + s.error().message);
    }
  }
  runner_options ro;
  ro.run_as = *run_as;
  std::optional<os::user_account> account;
  if (*run_as) {
    auto found = os::find_user((*run_as)->uid);
    if (found) {
      account = std::move(*found);
    } else {
      log(log_level::warning, "job " + id + ": " + found.error().message +
                                  "; its workers get HOME=" + store.job_dir(id).string());
    }
  }
  // Without peer credentials (Windows) every caller is "uid 0": a client's PATH would reach
  // workers of a service account that is not that client.
  if (os::peer_credentials_supported) {
    ro.login_env =
        worker_login_env(j.record, *run_as, daemon_uid, account, store.job_dir(id).string());
  }
  ro.worker_exe = options.worker_exe;
  ro.max_checkpoint_bytes = static_cast<std::uint64_t>(options.settings.max_checkpoint_mib) << 20;
  ro.log.max_bytes = static_cast<std::uint64_t>(options.settings.log_max_mib) << 20;
  ro.log.keep = options.settings.log_keep;
  std::weak_ptr<impl> weak = weak_from_this();
  // on_rest fires inside the runner's own event loop: the runner is retired from a fresh
  // handler, never from under its own feet.
  ro.on_rest = [weak, id, &io = io] {
    asio::post(io, [weak, id] {
      if (auto self = weak.lock()) self->on_rest(id);
    });
  };
  ro.on_event = [weak, id](const std::string& message) {
    if (auto self = weak.lock()) self->log(log_level::debug, "job " + id + ": " + message);
  };
  ro.on_notice = [weak, id](const std::string& message) {
    if (auto self = weak.lock()) self->log(log_level::info, "job " + id + ": " + message);
  };
  ro.on_change = [weak, id] {
    auto self = weak.lock();
    if (!self) return;
    self->newest_progress_id = id;
    const auto now = std::chrono::steady_clock::now();
    if (now - self->progress_published < std::chrono::seconds(1)) return;
    self->progress_published = now;
    self->publish_status();
  };
  if (!j.history) {
    auto h = job_history::open(e, job_history::file_in(store.job_dir(id)));
    if (h) {
      for (const auto& n : h->load_notes()) log(log_level::warning, "job " + id + ": " + n);
      j.history = std::make_unique<job_history>(std::move(*h));
    } else {
      log(log_level::warning, "job " + id + ": runs without a history: " + h.error().message);
    }
  }
  ro.history = j.history.get();
  log(log_level::info,
      "job " + id + ": starting" +
          (j.record.checkpoint_step > 0 ? " from step " + std::to_string(j.record.checkpoint_step)
                                        : std::string()));
  j.runner = std::make_unique<job_runner>(io, e, *options.launcher, store, j.record, *j.spec,
                                          std::move(ro));
  ++running;
  j.runner->start();
}

void daemon::impl::on_rest(const std::string& id) {
  const auto it = jobs.find(id);
  if (it == jobs.end() || !it->second.runner || !it->second.runner->at_rest()) return;
  auto& j = it->second;
  j.record = j.runner->record();
  j.runner.reset();
  j.history.reset();  // on disk; a job at rest is read from its file when asked
  --running;
  if (j.remove_at_rest && !stopping) {
    if (auto s = remove_job(id); !s) {
      log(log_level::warning, "job " + id + ": cancelled but not removed: " + s.error().message);
      it->second.remove_at_rest = false;
    }
    start_next();
    return;
  }
  auto& r = j.record;
  if (stopping && !feed(r, ev::requeued_for_restart{}).ignored) {
    log(log_level::info, "job " + id + ": stopped at checkpoint step " +
                             std::to_string(r.checkpoint_step) + "; queued for the next start");
  } else {
    log(r.state == job_state::failed ? log_level::warning : log_level::info,
        "job " + id + ": " + std::string(to_string(r.state)) +
            (r.diagnosis.empty() ? "" : " (" + r.diagnosis + ")"));
  }
  if (stopping) {
    publish_status();
    maybe_finish();
  } else {
    start_next();
  }
}

void daemon::impl::shutdown() {
  if (stopping) return;
  stopping = true;
  if (options.hooks.on_stopping) options.hooks.on_stopping();
  log(log_level::info,
      "shutting down: " + std::to_string(running) + " running job(s) checkpoint and stop first");
  if (server) server->stop();
  if (http) http->stop();
  for (auto& [id, j] : jobs) {
    if (j.runner) j.runner->pause("the baton daemon is shutting down");
  }
  publish_status();
  maybe_finish();
}

void daemon::impl::shutdown_now() {
  if (finished) return;
  stopping = true;
  if (server) server->stop();
  if (http) http->stop();
  log(log_level::warning, "stopping at once: killing " + std::to_string(running) + " worker(s)");
  for (auto& [id, j] : jobs) {
    if (!j.runner) continue;
    j.record = j.runner->record();
    j.runner.reset();  // kills the worker's group and descendants
    --running;
    feed(j.record, ev::requeued_for_restart{shard_open(j.record)});
  }
  finish(1);
}

void daemon::impl::maybe_finish() {
  if (!stopping || finished || running > 0) return;
  finish(0);
}

void daemon::impl::finish(int code) {
  finished = true;
  if (signals) {
    boost::system::error_code ignored;
    signals->cancel(ignored);
  }
  log(log_level::info, code == 0 ? "stopped" : "stopped by force");
  if (options.hooks.on_stopped) {
    options.hooks.on_stopped(code);
  } else {
    io.stop();
  }
}

void daemon::impl::reload() {
  if (options.hooks.on_reloading) options.hooks.on_reloading();
  if (!options.reload_settings) {
    log(log_level::info, "reload requested; there is no settings file to read");
  } else if (auto s = options.reload_settings(); !s) {
    log(log_level::error, "reload failed, settings unchanged:\n" + s.error().message);
  } else {
    auto& cur = options.settings;
    if (s->state_dir != cur.state_dir || s->socket != cur.socket ||
        s->socket_group != cur.socket_group || s->control_port != cur.control_port ||
        s->http_listen != cur.http_listen || s->header_timeout_ms != cur.header_timeout_ms ||
        s->max_connections != cur.max_connections ||
        s->max_connections_per_uid != cur.max_connections_per_uid) {
      log(log_level::warning,
          "reload: state_dir, socket, socket_group, control_port, http_listen, "
          "header_timeout_ms, max_connections and max_connections_per_uid take effect only on "
          "restart");
    }
    cur.max_workers = s->max_workers;
    cur.level = s->level;
    cur.default_soft_limit_mib = s->default_soft_limit_mib;
    cur.default_hard_limit_mib = s->default_hard_limit_mib;
    log(log_level::info, "reloaded settings: max_workers " + std::to_string(cur.max_workers) +
                             ", log_level " + std::string(to_string(cur.level)));
    start_next();
  }
  if (options.hooks.on_reloaded) options.hooks.on_reloaded();
}

void daemon::impl::wait_signal() {
  signals->async_wait([weak = weak_from_this()](const boost::system::error_code& ec, int sig) {
    auto self = weak.lock();
    if (ec || !self || self->finished) return;
    self->on_signal(sig);
    if (!self->finished) self->wait_signal();
  });
}

void daemon::impl::on_signal(int sig) {
#ifdef SIGHUP
  if (sig == SIGHUP) {
    log(log_level::info, "received SIGHUP: reloading settings");
    reload();
    return;
  }
#endif
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (!stopping) {
    log(log_level::info, std::string("received ") + name + " (again to stop at once)");
    shutdown();
  } else {
    log(log_level::warning, std::string("received ") + name + " again");
    shutdown_now();
  }
}

void daemon::impl::install_signals() {
  signals.emplace(io, SIGINT, SIGTERM);
#ifdef SIGHUP
  signals->add(SIGHUP);
#endif
  wait_signal();
}

daemon::daemon(asio::io_context& io, os::env& e, daemon_options options)
    : impl_(std::make_shared<impl>(io, e, std::move(options))) {}

daemon::~daemon() {
  if (impl_->http) impl_->http->stop();
  if (impl_->server) impl_->server->stop();
  if (impl_->signals) {
    boost::system::error_code ignored;
    impl_->signals->cancel(ignored);
  }
  for (auto& [id, j] : impl_->jobs) j.runner.reset();
  if (impl_->owns_containment) os::end_containment();
}

status daemon::start() {
  auto& m = *impl_;
  if (m.options.settings.state_dir.empty()) return make_error("daemon: no state directory set");
  if (m.options.settings.socket.empty()) return make_error("daemon: no socket path set");
  if (m.options.settings.control_port &&
      native_control_transport() != control_transport::tcp_loopback) {
    return make_error(
        "control_port: only used where the control API is loopback TCP (Windows); here it is the "
        "Unix socket `socket`");
  }
  if (auto s =
          check_run_as_setting(m.options.settings, m.daemon_uid, os::peer_credentials_supported);
      !s) {
    return s;
  }
  if (m.options.settings.run_as == jobs_run_as::submitter && !m.confined_env) {
    return make_error(
        "jobs_run_as = \"submitter\": the job folders belong to their users, and this daemon's "
        "files are not on the OS's disk (or it cannot guard them against links)");
  }
  if (m.options.become_subreaper) {
    if (auto s = os::become_subreaper(); !s) {
      m.log(log_level::warning, "cannot become subreaper: " + s.error().message);
    }
  }
  if (auto s = m.store.open(); !s) return with_context("state directory", s.error());
  if (m.options.settings.run_as == jobs_run_as::submitter) {
    // Workers reach their own folders through jobs/ as their users: traverse, but not list.
    if (auto s = m.e.set_owner(m.store.state_dir() / "jobs", m.daemon_uid, 0, 0711); !s) {
      return with_context("state directory", s.error());
    }
  }
  // The lock before the socket and before any job: one daemon per state directory, even when
  // a second one is given another socket.
  auto lock = m.options.locker->lock(m.store.state_dir(), "baton serve");
  if (!lock) {
    if (!lock.error().held_by_other) return lock.error().why;
    return make_error(lock.error().why.message +
                      "; stop it first, or give this daemon another --state-dir");
  }
  m.lock = std::move(*lock);
  control_server_options so;
  so.socket_path = m.options.settings.socket;
  so.group = m.options.settings.socket_group;
  so.header_timeout = std::chrono::milliseconds(m.options.settings.header_timeout_ms);
  so.max_sessions = static_cast<std::size_t>(m.options.settings.max_connections);
  so.max_sessions_per_uid = static_cast<std::size_t>(m.options.settings.max_connections_per_uid);
  if (m.options.settings.control_port) {
    so.port = static_cast<std::uint16_t>(*m.options.settings.control_port);
  }
  so.log = [weak = std::weak_ptr<impl>(impl_)](const std::string& message) {
    if (auto self = weak.lock()) self->log(log_level::warning, message);
  };
  m.server = std::make_unique<control_server>(m.io, *this, std::move(so));
  // The socket first: if another daemon answers there, it owns this state and we must not
  // touch a single job.
  if (auto s = m.server->start(); !s) {
    m.lock.reset();
    return s;
  }
  // Before any job starts: the cgroups, and what a previous daemon of this state dir left there.
  // Only for real workers: a test's fake launcher starts no process to hold.
  if (m.options.launcher == &os_process_launcher()) {
    m.owns_containment = true;
    std::string warning;
    m.containment = set_up_containment(m.options.settings.state_dir, warning);
    if (!warning.empty()) m.log(log_level::warning, warning);
    m.log(log_level::info, "containment: " + m.containment.detail);
    // The process-group fallback finds a worker's escapees by their /proc/PID/environ, which is
    // closed to a daemon without CAP_SYS_PTRACE once the worker runs as someone else.
    if (m.options.settings.run_as == jobs_run_as::submitter && m.containment.mode != "cgroup") {
      return make_error(
          "jobs_run_as = \"submitter\" needs cgroup containment (a worker running as another "
          "user could leave its process group unseen); here: " +
          m.containment.detail);
    }
    if (m.containment.leftovers_killed > 0) {
      m.log(log_level::warning, "killed " + std::to_string(m.containment.leftovers_killed) +
                                    " process(es) a previous daemon's workers left behind");
    }
  }
  if (m.options.settings.http_listen) {
    // Checked when the settings were read; parsed again for settings built in code.
    auto where = parse_http_listen(*m.options.settings.http_listen);
    // The dashboard's token, new at every start (Jupyter's habit): 256 bits, in the URL printed
    // below and in a file of the state dir only the daemon's user can read.
    auto token = make_control_token();
    if (!token) return with_context("dashboard token", token.error());
    if (where) {
      m.http = std::make_unique<http_listener>(
          m.io, *this, *where,
          [weak = std::weak_ptr<impl>(impl_)](const std::string& message) {
            if (auto self = weak.lock()) self->log(log_level::warning, "http_listen: " + message);
          },
          *token);
    }
    const status s = where ? m.http->start() : status(where.error());
    if (!s) {
      m.http.reset();
      m.server->stop();
      m.lock.reset();
      return s;
    }
    m.log(log_level::info, "metrics on " + m.http->url() + "/metrics (read-only, loopback)");
    const auto url = m.http->dashboard_url();
    if (auto w = os::write_private_file(dashboard_url_file(m.store.state_dir()), url + "\n",
                                        std::nullopt);
        !w) {
      m.log(log_level::warning, "cannot write the dashboard's URL file: " + w.error().message);
    }
    m.log(log_level::info, "dashboard on " + url);
  } else {
    // No listener, no dashboard: an older start's URL names a token and port that are gone.
    std::error_code ignored;
    fs::remove(dashboard_url_file(m.store.state_dir()), ignored);
  }
  if (m.options.become_subreaper) m.reaper = std::make_unique<os::child_reaper>(m.io);
  if (auto s = m.recover(); !s) {
    if (m.http) m.http->stop();
    m.server->stop();
    m.lock.reset();
    return with_context("recovering jobs", s.error());
  }
  if (m.options.handle_signals) m.install_signals();
  m.log(log_level::info, "serving on " + m.server->description() + " (max_workers " +
                             std::to_string(m.options.settings.max_workers) + ", containment " +
                             m.containment.mode + ")");
  m.start_next();
  if (m.options.hooks.on_ready) m.options.hooks.on_ready();
  return {};
}

void daemon::shutdown() { impl_->shutdown(); }
void daemon::shutdown_now() { impl_->shutdown_now(); }
void daemon::reload() { impl_->reload(); }

api_response daemon::handle(const api_call& call) {
  return handle(call, api_caller{impl_->daemon_uid, true});
}

api_response daemon::handle(const api_call& call, const api_caller& caller) {
  auto& m = *impl_;
  return std::visit(
      [&](const auto& c) -> api_response {
        // Every call naming a job, today's and any added later, passes the owner check first.
        if constexpr (requires { c.id; }) {
          if (const auto* j = m.find(c.id)) {
            const auto owner = job_owner_uid(j->current(), m.daemon_uid);
            if (auto denied = check_job_access(caller, c.id, owner)) return error_response(*denied);
          }
          return m.on_call(c);
        } else if constexpr (requires { m.on_call(c, caller); }) {
          return m.on_call(c, caller);
        } else {
          return m.on_call(c);
        }
      },
      call);
}

std::unique_ptr<os::env> daemon::impl::confine(os::env& base, const daemon_settings& s) {
  // Only over the real disk: an in-memory env (tests) has no links to plant.
  if (s.run_as != jobs_run_as::submitter || &base != &os::env::default_env()) return nullptr;
  auto confined = os::make_no_follow_env(s.state_dir / "jobs");
  return confined ? std::move(*confined) : nullptr;
}

std::size_t daemon::running_count() const { return impl_->running; }
std::vector<std::string> daemon::queued_ids() const {
  return {impl_->queue.begin(), impl_->queue.end()};
}
bool daemon::stopping() const { return impl_->stopping; }
std::chrono::milliseconds daemon::longest_stop_grace() const {
  std::int64_t longest = 0;
  for (const auto& [id, j] : impl_->jobs) {
    if (j.runner && j.spec) longest = std::max(longest, j.spec->worker.stop_grace_ms);
  }
  return std::chrono::milliseconds(longest);
}
const daemon_settings& daemon::settings() const { return impl_->options.settings; }

}  // namespace baton::supervisor
