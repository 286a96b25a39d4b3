// Running as a Windows service, and installing or removing one. The Service Control Manager
// starts the process, calls the service on a thread of its own and sends control requests on
// yet another; this interface turns that into a body function (run on the service thread), a
// request handler the body installs once it can act, and the os::notify_* calls of
// os/service_notify.h, which report the body's progress to the SCM while it runs (so a daemon
// written for systemd's notify protocol needs no other change). On other platforms every call
// returns a "not supported" error: there systemd runs baton (deploy/systemd/baton.service).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/service_model.h"

namespace baton::os {

// True where run_as_service and install_service can work (Windows).
bool service_manager_supported();

// The running service as the body sees it.
class service_session {
 public:
  virtual ~service_session() = default;
  // The name the SCM started the service under.
  virtual std::string name() const = 0;
  // Installs the handler for drain and reload requests; an empty function removes it. It runs
  // on the SCM's thread while the body's own loop is busy, so it should only post work there.
  // Requests that came before a handler are delivered to the next one installed; once a call
  // that removes the handler returns, the old handler is never called again.
  virtual void set_handler(std::function<void(service_action)> handler) = 0;
};

// Connects to the SCM and runs `body` as the service: START_PENDING at once, RUNNING on
// notify_ready(), STOP_PENDING on a drain request or notify_stopping() with the checkpoint
// advancing on each notify_extend_timeout(), then STOPPED with the body's exit code (non-zero:
// a service-specific error, which the recovery actions treat as a failure). Blocks until the
// SCM lets go and returns that code. An error when the process was not started by the SCM
// (error 1063), when the body threw, or on another platform.
result<int> run_as_service(std::function<int(service_session&)> body);

// Failure = the service ended with a non-zero exit code or the process died; the SCM then waits
// each delay in turn (the last one repeats) before starting it again, and forgets past failures
// after reset_period without one.
struct service_install_options {
  std::string name;
  std::string display_name;
  std::string description;
  std::string command_line;  // the executable, quoted, and its arguments (SCM "binary path")
  std::vector<std::chrono::milliseconds> restart_delays;
  std::chrono::seconds reset_period{86400};
  // How long a preshutdown drain may take at system shutdown before Windows goes on without us.
  std::chrono::milliseconds preshutdown_timeout{180000};
};

// Registers an auto-start service running as LocalSystem, with its recovery actions. A part of
// the configuration that fails rolls the service back, except where `warn` says otherwise.
status install_service(const service_install_options& o,
                       const std::function<void(const std::string&)>& warn);

// Sends SERVICE_CONTROL_PARAMCHANGE: a running `baton serve --service` re-reads its settings
// file, as SIGHUP does under systemd.
status reload_service(const std::string& name);

// Stops the service (its workers checkpoint first; `progress` hears what it is waiting for)
// unless it is stopped already, then deletes it. Gives up on a service that stops advancing its
// checkpoint (os::stop_wait) or takes longer than `timeout`, and leaves it installed then.
status uninstall_service(const std::string& name, std::chrono::seconds timeout,
                         const std::function<void(const std::string&)>& progress);

}  // namespace baton::os
