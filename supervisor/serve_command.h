// `baton serve`: runs the daemon (supervisor/daemon.h) in the foreground until SIGTERM/SIGINT,
// the way systemd or a terminal starts it; `baton serve --service` runs it under the Windows
// Service Control Manager instead (os/service_host.h), whose stop and parameter-change requests
// act as SIGTERM and SIGHUP. Settings come from --settings FILE, then single command-line flags
// override them; SIGHUP re-reads the file with the same flags on top.
#pragma once

#include <optional>
#include <string>

#include "supervisor/cli.h"
#include "supervisor/daemon_settings.h"

namespace baton::supervisor {

void add_serve_command(CLI::App& app, cli_context& ctx);

// The flags of `baton serve` that override the settings file; unset ones leave it alone.
struct serve_overrides {
  std::string state_dir;
  std::string socket;
  std::string group;
  std::optional<int> max_workers;
  std::string log_level;
};

// File (if any), then flags, then defaults for what is still unset: state_dir from
// os::default_state_dir(), socket from $BATON_SOCKET or default_socket_path().
result<daemon_settings> resolve_daemon_settings(os::env& e, const std::string& file,
                                                const serve_overrides& flags);

}  // namespace baton::supervisor
