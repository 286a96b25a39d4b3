#include "supervisor/serve_command.h"

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <iostream>

#include "os/env.h"
#include "os/peer_credentials.h"
#include "os/process.h"
#include "os/system.h"
#include "supervisor/control_server.h"
#include "supervisor/daemon.h"
#include "supervisor/run_command.h"

namespace baton {

namespace fs = std::filesystem;
using namespace baton::supervisor;

namespace {

struct serve_options {
  std::string settings_file;
  serve_overrides flags;
  std::string worker;
};

int serve(const serve_options& o, cli_context& ctx) {
  auto& e = ctx.environment;
  auto settings = resolve_daemon_settings(e, o.settings_file, o.flags);
  if (!settings) {
    ctx.err << settings.error().message << "\n";
    return exit_invalid;
  }
  daemon_options d;
  d.settings = *settings;
  d.worker_exe = o.worker.empty() ? find_worker_executable(e) : fs::path(o.worker);
  if (!d.worker_exe.empty() && !e.file_exists(d.worker_exe)) {
    ctx.err << "worker executable " << d.worker_exe.string() << " does not exist\n";
    return exit_failure;
  }
  d.reload_settings = [&e, o] { return resolve_daemon_settings(e, o.settings_file, o.flags); };
  int exit_code = exit_ok;
  boost::asio::io_context io;
  d.hooks.on_stopped = [&](int code) {
    exit_code = code;
    io.stop();
  };
  d.hooks.log = [&ctx](log_level level, const std::string& message) {
    ctx.err << "baton: " << to_string(level) << ": " << message << std::endl;
  };
  // Flushed before any worker is spawned: a failed exec in a child would flush it twice.
  ctx.out.flush();
  ctx.err.flush();
  supervisor::daemon daemon(io, e, std::move(d));
  ctx.err << "baton: info: settings " << to_json(*settings).dump() << std::endl;
  if (auto s = daemon.start(); !s) {
    ctx.err << "baton serve: " << s.error().message << "\n";
    return exit_failure;
  }
  io.run();
  // Anything a worker left behind that re-parented to us (we are its subreaper) goes too.
  (void)os::kill_orphans();
  return exit_code;
}

}  // namespace

result<daemon_settings> resolve_daemon_settings(env& e, const std::string& file,
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
  cmd->callback([o, &ctx] { ctx.exit_code = serve(*o, ctx); });
}

}  // namespace baton
