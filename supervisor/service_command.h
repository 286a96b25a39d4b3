// `baton service install|reload|uninstall`: registers `baton serve --service` with the Windows
// Service Control Manager (auto start, LocalSystem, restart on failure after 5 s, 10 s, 30 s,
// failures forgotten after a day), sends it a parameter change (settings reload), or stops and
// removes it. The service's command line is built here from
// plain data, so what the SCM will run is tested on every platform; os/service_host.h does the
// Win32 calls. Elsewhere the verb explains that systemd runs baton and exits 2.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/service_host.h"
#include "supervisor/cli.h"

namespace baton::supervisor {

void add_service_command(CLI::App& app, cli_context& ctx);

// What `baton service install` decided, every path absolute: the service starts in the system
// folder, so a relative path would name something else there.
struct service_install_request {
  std::string name = "baton";
  std::string display_name;  // empty: "baton training supervisor" (+ " (NAME)" unless baton)
  std::string baton_exe;
  std::string settings_file;  // empty: none
  std::string state_dir;      // empty: the settings file's
  std::string log_file;
  std::string worker_exe;  // empty: serve's default (next to baton)
};

inline constexpr std::chrono::seconds service_restart_delays[] = {
    std::chrono::seconds(5), std::chrono::seconds(10), std::chrono::seconds(30)};
inline constexpr std::chrono::hours service_failure_reset{24};

// A name the SCM accepts: 1 to 256 characters, no '/' or '\'.
status check_service_name(const std::string& name);

// {baton_exe, "serve", "--service", ...} with the options the request sets.
std::vector<std::string> service_argv(const service_install_request& r);

// Everything install_service needs: the quoted command line, description and recovery actions.
os::service_install_options service_install_options_for(const service_install_request& r);

}  // namespace baton::supervisor
