#include "supervisor/serve_command.h"

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>

#include "os/env.h"
#include "os/peer_credentials.h"
#include "os/process.h"
#include "os/service_host.h"
#include "os/service_notify.h"
#include "os/system.h"
#include "supervisor/control_server.h"
#include "supervisor/daemon.h"
#include "supervisor/run_command.h"

namespace baton::supervisor {

namespace fs = std::filesystem;
using namespace baton::supervisor;

namespace {

namespace asio = boost::asio;
using std::chrono::steady_clock;

// Speaks systemd's notify protocol for the daemon. READY=1 waits for a listening socket and
// recovered jobs; STATUS= goes out at most once a second (progress changes every step); the
// watchdog is fed from a timer on the daemon's own event loop, so a stuck loop starves it and
// systemd restarts us; during a graceful shutdown EXTEND_TIMEOUT_USEC= keeps TimeoutStopSec=
// from cutting off workers that are still writing their checkpoints.
class service_notifier {
 public:
  static constexpr auto status_period = std::chrono::seconds(1);
  static constexpr auto extend_period = std::chrono::seconds(5);
  // Beyond the workers' grace: after it the daemon still kills them and saves their records.
  static constexpr auto extend_margin = std::chrono::seconds(15);

  service_notifier(asio::io_context& io, std::function<void(const std::string&)> warn)
      : status_timer_(io), watchdog_timer_(io), extend_timer_(io), warn_(std::move(warn)) {}

  // Sets the hooks before the daemon exists (it copies its options); the daemon is named after.
  void attach(daemon_hooks& h) {
    h.on_ready = [this] { ready(); };
    h.on_status = [this](const std::string& text) { status(text); };
    h.on_reloading = [this] { check("RELOADING=1", os::notify_reloading("reloading settings")); };
    h.on_reloaded = [this] { check("READY=1", os::notify_ready(latest_)); };
    h.on_stopping = [this] { stopping(); };
  }

  // Armed before start(), but the first WATCHDOG=1 goes out from io.run(), after READY=1:
  // start() (socket and recovery) runs before the loop does.
  void start_watchdog() {
    const auto interval = os::watchdog_interval();
    if (!interval) return;
    watchdog_period_ =
        std::max<steady_clock::duration>(*interval / 2, std::chrono::milliseconds(1));
    feed_watchdog();
  }

  void watch(const daemon& d) { daemon_ = &d; }

  void stop() {
    status_timer_.cancel();
    watchdog_timer_.cancel();
    extend_timer_.cancel();
  }

 private:
  void check(const char* what, const status& s) {
    // Only while a manager listens can a send fail; say so once rather than every second.
    if (!s && !warned_) {
      warned_ = true;
      warn_(std::string("cannot notify the service manager (") + what + "): " + s.error().message);
    }
  }

  void ready() {
    ready_ = true;
    check("READY=1", os::notify_ready(latest_));
    sent_ = latest_;
    last_sent_ = steady_clock::now();
  }

  void status(const std::string& text) {
    latest_ = text;
    // Before READY=1 the text rides on the READY message itself.
    if (!ready_ || pending_) return;
    const auto next = last_sent_ + status_period;
    if (steady_clock::now() >= next) {
      send_status();
      return;
    }
    pending_ = true;
    status_timer_.expires_at(next);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      pending_ = false;
      send_status();
    });
  }

  void send_status() {
    if (latest_ == sent_) return;
    check("STATUS=", os::notify_status(latest_));
    sent_ = latest_;
    last_sent_ = steady_clock::now();
  }

  void feed_watchdog() {
    watchdog_timer_.expires_after(watchdog_period_);
    watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      check("WATCHDOG=1", os::notify_watchdog());
      feed_watchdog();
    });
  }

  void stopping() {
    // The daemon's own "stopping: ..." line follows, rate-limited like any status.
    check("STOPPING=1", os::notify_stopping("stopping: " + latest_));
    stopping_since_ = steady_clock::now();
    extend();
  }

  void extend() {
    if (daemon_ == nullptr || daemon_->running_count() == 0) return;
    const auto elapsed = steady_clock::now() - stopping_since_;
    const auto remaining = std::max<steady_clock::duration>(daemon_->longest_stop_grace() - elapsed,
                                                            steady_clock::duration::zero());
    // At least two periods, so one late timer never lets the timeout run out.
    const auto more =
        std::max<steady_clock::duration>(remaining, 2 * extend_period) + extend_margin;
    check("EXTEND_TIMEOUT_USEC=",
          os::notify_extend_timeout(std::chrono::ceil<std::chrono::milliseconds>(more)));
    extend_timer_.expires_after(extend_period);
    extend_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) extend();
    });
  }

  asio::steady_timer status_timer_, watchdog_timer_, extend_timer_;
  std::function<void(const std::string&)> warn_;
  const daemon* daemon_ = nullptr;
  bool ready_ = false, pending_ = false, warned_ = false;
  std::string latest_ = "starting", sent_;
  steady_clock::time_point last_sent_{}, stopping_since_{};
  steady_clock::duration watchdog_period_{};
};

struct serve_options {
  std::string settings_file;
  serve_overrides flags;
  std::string worker;
  bool service = false;
  std::string log_file;
};

// Where serve's own lines go: stderr (the journal adds time stamps), or a file, as a Windows
// service has no console, with a UTC time stamp on every line.
class serve_log {
 public:
  explicit serve_log(std::ostream& console) : out_(&console) {}

  status open(const fs::path& file) {
    std::error_code ec;
    if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
    file_.open(file, std::ios::app);
    if (!file_) return make_error("cannot open log file " + file.string());
    out_ = &file_;
    stamp_ = true;
    return {};
  }
  bool is_open() const { return file_.is_open(); }

  // The start of a line; callers end it with std::endl so a crash loses nothing.
  std::ostream& line() {
    if (stamp_) {
      const std::time_t now = std::time(nullptr);
      char buf[32];
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ ", std::gmtime(&now));
      *out_ << buf;
    }
    return *out_;
  }

 private:
  std::ostream* out_;
  std::ofstream file_;
  bool stamp_ = false;
};

// `session`: running under the Windows Service Control Manager, whose stop and parameter-change
// requests then do what SIGTERM and SIGHUP do.
int serve(const serve_options& o, cli_context& ctx, os::service_session* session) {
  auto& e = ctx.environment;
  serve_log out(ctx.err);
  if (!o.log_file.empty()) {
    if (auto s = out.open(fs::absolute(o.log_file)); !s) {
      ctx.err << "baton serve: " << s.error().message << "\n";
      return exit_failure;
    }
  }
  auto settings = resolve_daemon_settings(e, o.settings_file, o.flags);
  if (!settings) {
    out.line() << settings.error().message << std::endl;
    return exit_invalid;
  }
  if (session != nullptr && !out.is_open()) {
    if (auto s = out.open(settings->state_dir / "service.log"); !s) return exit_failure;
  }
  daemon_options d;
  d.settings = *settings;
  // Absolute: a worker runs in its job's folder, where a relative path means something else.
  std::error_code abs_ec;
  d.worker_exe = o.worker.empty() ? find_worker_executable(e) : fs::absolute(o.worker, abs_ec);
  if (abs_ec) d.worker_exe = o.worker;
  if (!d.worker_exe.empty() && !e.file_exists(d.worker_exe)) {
    out.line() << "worker executable " << d.worker_exe.string() << " does not exist" << std::endl;
    return exit_failure;
  }
  d.reload_settings = [&e, o] { return resolve_daemon_settings(e, o.settings_file, o.flags); };
  int exit_code = exit_ok;
  boost::asio::io_context io;
  service_notifier notifier(io, [&out](const std::string& message) {
    out.line() << "baton: warning: " << message << std::endl;
  });
  d.hooks.on_stopped = [&](int code) {
    exit_code = code;
    notifier.stop();
    io.stop();
  };
  d.hooks.log = [&out](log_level level, const std::string& message) {
    out.line() << "baton: " << to_string(level) << ": " << message << std::endl;
  };
  // Flushed before any worker is spawned: a failed exec in a child would flush it twice.
  ctx.out.flush();
  ctx.err.flush();
  notifier.attach(d.hooks);
  daemon daemon(io, e, std::move(d));
  notifier.watch(daemon);
  notifier.start_watchdog();
  out.line() << "baton: info: settings " << to_json(*settings).dump() << std::endl;
  if (session != nullptr) {
    out.line() << "baton: info: running as Windows service " << session->name() << std::endl;
    // The SCM calls from its own thread: hand each request to the io thread, where the daemon
    // lives. Removed again before the daemon and the io_context go away.
    session->set_handler([&io, &daemon, &out](os::service_action a) {
      boost::asio::post(io, [&daemon, &out, a] {
        if (a == os::service_action::drain) {
          out.line() << "baton: info: the Service Control Manager asks the daemon to stop"
                     << std::endl;
          daemon.shutdown();
        } else if (a == os::service_action::reload) {
          out.line() << "baton: info: the Service Control Manager asks to reload settings"
                     << std::endl;
          daemon.reload();
        }
      });
    });
  }
  struct unhook {
    os::service_session* s;
    ~unhook() {
      if (s != nullptr) s->set_handler({});
    }
  } unhook_on_return{session};
  if (auto s = daemon.start(); !s) {
    out.line() << "baton serve: " << s.error().message << std::endl;
    return exit_failure;
  }
  io.run();
  // Anything a worker left behind that re-parented to us (we are its subreaper) goes too.
  (void)os::kill_orphans();
  return exit_code;
}

int serve_service(const serve_options& o, cli_context& ctx) {
  auto code = os::run_as_service(
      [&o, &ctx](os::service_session& session) { return serve(o, ctx, &session); });
  if (!code) {
    ctx.err << "baton serve --service: " << code.error().message << "\n";
    return os::service_manager_supported() ? exit_failure : exit_invalid;
  }
  return *code;
}

}  // namespace

result<daemon_settings> resolve_daemon_settings(os::env& e, const std::string& file,
                                                const serve_overrides& flags) {
  daemon_settings s;
  if (!file.empty()) {
    auto loaded = load_daemon_settings(e, file);
    if (!loaded) return loaded.error();
    s = std::move(*loaded);
  }
  const auto absolute = [](const std::string& p) {
    std::error_code ec;
    auto a = fs::absolute(p, ec);
    return ec ? fs::path(p) : a.lexically_normal();
  };
  if (!flags.state_dir.empty()) s.state_dir = absolute(flags.state_dir);
  if (!flags.socket.empty()) s.socket = absolute(flags.socket);
  if (!flags.group.empty()) s.socket_group = flags.group;
  if (flags.max_workers) {
    if (*flags.max_workers < 1 || *flags.max_workers > max_max_workers) {
      return make_error("--max-workers: expected 1 to " + std::to_string(max_max_workers) +
                        ", got " + std::to_string(*flags.max_workers));
    }
    s.max_workers = *flags.max_workers;
  }
  if (!flags.log_level.empty()) {
    auto l = parse_log_level(flags.log_level);
    if (!l) return make_error("--log-level: " + l.error().message);
    s.level = *l;
  }
  if (s.state_dir.empty()) s.state_dir = os::default_state_dir();
  if (s.socket.empty()) {
    if (auto env_socket = os::get_env("BATON_SOCKET"); env_socket && !env_socket->empty()) {
      s.socket = absolute(*env_socket);
    } else {
      const auto xdg = os::get_env("XDG_RUNTIME_DIR");
      s.socket = default_socket_path(os::current_uid(), xdg ? xdg->c_str() : nullptr);
    }
  }
  return s;
}

void add_serve_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<serve_options>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Run the baton daemon in the foreground: accept jobs on the control socket and run them "
      "(SIGTERM: workers checkpoint, jobs resume at the next start; SIGHUP: reload settings)");
  cmd->add_option("--settings", o->settings_file, "Daemon settings file (JSON; see DAEMON.md)");
  cmd->add_option("--state-dir", o->flags.state_dir,
                  "Where job state lives (default: settings, $BATON_STATE_DIR, "
                  "$XDG_STATE_HOME/baton or ~/.local/state/baton)");
  cmd->add_option("--socket", o->flags.socket,
                  "Control socket path (default: settings, $BATON_SOCKET, /run/baton/baton.sock "
                  "for root, else $XDG_RUNTIME_DIR/baton/baton.sock or /tmp/baton-UID/baton.sock)");
  cmd->add_option("--group", o->flags.group,
                  "Group whose members may use the control socket (default: only this user and "
                  "root)");
  cmd->add_option("--max-workers", o->flags.max_workers, "Jobs running at once (default 1)");
  cmd->add_option("--log-level", o->flags.log_level, "error, warning, info (default) or debug");
  cmd->add_option("--worker", o->worker,
                  "The baton-worker executable for jobs without "
                  "worker.command (default: next to baton)");
  cmd->add_option("--log-file", o->log_file,
                  "Append the daemon's log here, time-stamped, instead of stderr (with --service "
                  "default: service.log in the state directory)");
  cmd->add_flag("--service", o->service,
                "Run under the Windows Service Control Manager (as `baton service install` sets "
                "up): stop and shutdown drain like SIGTERM, parameter change reloads like SIGHUP");
  cmd->callback(
      [o, &ctx] { ctx.exit_code = o->service ? serve_service(*o, ctx) : serve(*o, ctx, nullptr); });
}

}  // namespace baton::supervisor
