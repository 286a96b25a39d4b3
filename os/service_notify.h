// Tells the service manager how the daemon is doing: systemd's notify protocol on Linux
// (READY=1, STATUS=, WATCHDOG=1, RELOADING=1, STOPPING=1, EXTEND_TIMEOUT_USEC=); on Windows, while
// the process runs as a service (os/service_host.h), SetServiceStatus reports. Every call is cheap
// and a no-op when no service manager started the daemon (NOTIFY_SOCKET unset, or a console).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "base/status.h"

namespace baton::os {

// True when a service manager listens (NOTIFY_SOCKET is set; Windows: running as a service).
bool notify_enabled();

// Each returns an error only when a manager listens and the message could not be sent.
status notify_ready(const std::string& status_text);
status notify_status(const std::string& status_text);
status notify_watchdog();
status notify_stopping(const std::string& status_text);
// RELOADING=1 with MONOTONIC_USEC= (which Type=notify-reload requires); READY=1 ends the reload.
status notify_reloading(const std::string& status_text);
status notify_extend_timeout(std::chrono::microseconds more);

// The watchdog period the manager expects (WatchdogSec=), if it asked for one.
std::optional<std::chrono::microseconds> watchdog_interval();

}  // namespace baton::os
