#include "supervisor/service_command.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>

#include "os/env.h"
#include "os/system.h"
#include "os/windows_command_line.h"
#include "supervisor/daemon_settings.h"

namespace baton::supervisor {

namespace fs = std::filesystem;

namespace {

constexpr const char* default_display_name = "baton training supervisor";
constexpr const char* description =
    "Runs long ML training jobs as shards in fresh worker processes, restarting leaky or crashed "
    "workers from their last checkpoint. Stopping it lets workers checkpoint first.";

struct install_options {
  std::string name = "baton";
  std::string display_name;
  std::string settings_file;
  std::string state_dir;
  std::string log_file;
  std::string worker;
};

struct uninstall_options {
  std::string name = "baton";
  int timeout_s = 300;
};

// A path as UTF-8 text, the form every string in baton takes, and back.
std::string text(const fs::path& p) {
  const auto u8 = p.u8string();
  return std::string(u8.begin(), u8.end());
}
fs::path from_text(const std::string& utf8) {
  return fs::path(std::u8string(utf8.begin(), utf8.end()));
}

std::string absolute_text(const std::string& p) {
  std::error_code ec;
  const auto a = fs::absolute(from_text(p), ec);
  return text(ec ? from_text(p) : a.lexically_normal());
}

bool supported(cli_context& ctx) {
  if (os::service_manager_supported()) return true;
  ctx.err << "baton service: there is no Windows Service Control Manager on this platform; run "
             "baton under systemd with the unit in deploy/systemd/baton.service (see "
             "deploy/README.md)\n";
  ctx.exit_code = exit_invalid;
  return false;
}

int install(const install_options& o, cli_context& ctx) {
  auto& e = ctx.environment;
  if (auto s = check_service_name(o.name); !s) {
    ctx.err << "baton service install: --name: " << s.error().message << "\n";
    return exit_usage;
  }
  service_install_request r;
  r.name = o.name;
  r.display_name = o.display_name;
  r.baton_exe = text(os::executable_path());
  if (r.baton_exe.empty()) {
    ctx.err << "baton service install: cannot tell where this baton executable lives\n";
    return exit_failure;
  }
  // The state directory the service will use decides where its log goes: --state-dir, else
  // the settings file's, else %ProgramData%\baton (the installing user's own folders would be
  // wrong for a LocalSystem service).
  fs::path state_dir;
  if (!o.settings_file.empty()) {
    r.settings_file = absolute_text(o.settings_file);
    auto settings = load_daemon_settings(e, from_text(r.settings_file));
    if (!settings) {
      ctx.err << settings.error().message << "\n";
      return exit_invalid;
    }
    state_dir = settings->state_dir;
  }
  if (!o.state_dir.empty()) {
    r.state_dir = absolute_text(o.state_dir);
    state_dir = from_text(r.state_dir);
  } else if (state_dir.empty()) {
    const auto program_data = os::get_env("ProgramData");
    if (!program_data || program_data->empty()) {
      ctx.err << "baton service install: %ProgramData% is not set; pass --state-dir\n";
      return exit_failure;
    }
    r.state_dir = text(from_text(*program_data) / "baton");
    state_dir = from_text(r.state_dir);
  }
  r.log_file = o.log_file.empty() ? text(state_dir / "service.log") : absolute_text(o.log_file);
  if (!o.worker.empty()) {
    r.worker_exe = absolute_text(o.worker);
  } else if (const auto next_to_us = from_text(r.baton_exe).parent_path() / "baton-worker.exe";
             e.file_exists(next_to_us)) {
    r.worker_exe = text(next_to_us);
  }
  if (!r.worker_exe.empty() && !e.file_exists(from_text(r.worker_exe))) {
    ctx.err << "baton service install: worker executable " << r.worker_exe << " does not exist\n";
    return exit_failure;
  }
  const auto options = service_install_options_for(r);
  auto s = os::install_service(options, [&ctx](const std::string& message) {
    ctx.err << "baton service install: warning: " << message << "\n";
  });
  if (!s) {
    ctx.err << "baton service install: " << s.error().message << "\n";
    return exit_failure;
  }
  ctx.out << "installed service " << r.name << ": " << options.command_line << "\n"
          << "log: " << r.log_file << "\n"
          << "start it with `sc start " << r.name << "` or `Start-Service " << r.name << "`\n";
  return exit_ok;
}

int uninstall(const uninstall_options& o, cli_context& ctx) {
  if (auto s = check_service_name(o.name); !s) {
    ctx.err << "baton service uninstall: --name: " << s.error().message << "\n";
    return exit_usage;
  }
  auto s = os::uninstall_service(
      o.name, std::chrono::seconds(o.timeout_s),
      [&ctx](const std::string& message) { ctx.out << message << std::endl; });
  if (!s) {
    ctx.err << "baton service uninstall: " << s.error().message << "\n";
    return exit_failure;
  }
  ctx.out << "removed service " << o.name << "\n";
  return exit_ok;
}

}  // namespace

status check_service_name(const std::string& name) {
  if (name.empty()) return make_error("a service name cannot be empty");
  if (name.size() > 256) {
    return make_error("a service name has at most 256 characters, got " +
                      std::to_string(name.size()));
  }
  if (name.find_first_of("/\\") != std::string::npos) {
    return make_error("a service name cannot contain '/' or '\\': " + name);
  }
  return {};
}

std::vector<std::string> service_argv(const service_install_request& r) {
  std::vector<std::string> argv{r.baton_exe, "serve", "--service"};
  const auto add = [&argv](const char* flag, const std::string& value) {
    if (value.empty()) return;
    argv.emplace_back(flag);
    argv.push_back(value);
  };
  add("--settings", r.settings_file);
  add("--state-dir", r.state_dir);
  add("--log-file", r.log_file);
  add("--worker", r.worker_exe);
  return argv;
}

os::service_install_options service_install_options_for(const service_install_request& r) {
  os::service_install_options o;
  o.name = r.name;
  // Display names must be unique too: a second service gets its name added.
  o.display_name = !r.display_name.empty() ? r.display_name
                   : r.name == "baton"     ? std::string(default_display_name)
                                       : std::string(default_display_name) + " (" + r.name + ")";
  o.description = description;
  o.command_line = os::windows_command_line(service_argv(r));
  for (const auto d : service_restart_delays) {
    o.restart_delays.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(d));
  }
  o.reset_period = service_failure_reset;
  return o;
}

void add_service_command(CLI::App& app, cli_context& ctx) {
  auto* cmd = app.add_subcommand(
      "service",
      "Install, reload or remove baton as a Windows service (`baton serve --service`); on Linux "
      "use the systemd unit in deploy/systemd");
  cmd->require_subcommand(1);

  auto i = std::make_shared<install_options>();
  auto* inst = cmd->add_subcommand(
      "install",
      "Register an auto-start service running `baton serve --service` as LocalSystem, restarted "
      "5 s, 10 s and 30 s after failures (run elevated)");
  inst->add_option("--name", i->name, "Service name (default baton)");
  inst->add_option("--display-name", i->display_name,
                   "Name shown in services.msc (default: baton training supervisor, plus the "
                   "service name if that is not baton)");
  inst->add_option("--settings", i->settings_file,
                   "Daemon settings file the service reads (checked now; see DAEMON.md)");
  inst->add_option("--state-dir", i->state_dir,
                   "Job state folder (default: the settings file's, else %ProgramData%\\baton)");
  inst->add_option("--log-file", i->log_file,
                   "The service's log (default: service.log in the state folder)");
  inst->add_option("--worker", i->worker,
                   "baton-worker executable (default: baton-worker.exe next to baton.exe)");
  inst->callback([i, &ctx] {
    if (supported(ctx)) ctx.exit_code = install(*i, ctx);
  });

  auto rl = std::make_shared<std::string>("baton");
  auto* reload = cmd->add_subcommand(
      "reload", "Ask the running service to re-read its settings file (as SIGHUP does on Linux)");
  reload->add_option("--name", *rl, "Service name (default baton)");
  reload->callback([rl, &ctx] {
    if (!supported(ctx)) return;
    if (auto s = check_service_name(*rl); !s) {
      ctx.err << "baton service reload: --name: " << s.error().message << "\n";
      ctx.exit_code = exit_usage;
      return;
    }
    if (auto s = os::reload_service(*rl); !s) {
      ctx.err << "baton service reload: " << s.error().message << "\n";
      ctx.exit_code = exit_failure;
      return;
    }
    ctx.out << "asked service " << *rl << " to reload its settings (see its log)\n";
    ctx.exit_code = exit_ok;
  });

  auto u = std::make_shared<uninstall_options>();
  auto* uninst = cmd->add_subcommand(
      "uninstall", "Stop the service (running jobs checkpoint first) and remove it (run elevated)");
  uninst->add_option("--name", u->name, "Service name (default baton)");
  uninst
      ->add_option("--timeout", u->timeout_s,
                   "Seconds to wait for the service to stop (default 300)")
      ->check(CLI::Range(1, 86400));
  uninst->callback([u, &ctx] {
    if (supported(ctx)) ctx.exit_code = uninstall(*u, ctx);
  });
}

}  // namespace baton::supervisor
