// Windows has no notify socket. While `baton serve --service` runs under the Service Control
// Manager (os/service_host.h), the calls that change the service's state become SetServiceStatus
// reports: ready -> RUNNING, stopping -> STOP_PENDING, extend -> the next checkpoint with a new
// wait hint. STATUS text, the watchdog and reloads have no SCM counterpart (a reload keeps the
// service RUNNING). In a console every call is the no-op of a daemon no manager listens to.
#include "os/service_notify.h"
#include "os/windows/service_host_windows.h"

namespace baton::os {

bool notify_enabled() { return win::service_hosted(); }
status notify_ready(const std::string&) { return win::service_report_ready(); }
status notify_status(const std::string&) { return {}; }
status notify_watchdog() { return {}; }
status notify_stopping(const std::string&) { return win::service_report_stopping(); }
status notify_reloading(const std::string&) { return {}; }
status notify_extend_timeout(std::chrono::microseconds more) {
  return win::service_report_extend(std::chrono::ceil<std::chrono::milliseconds>(more));
}
std::optional<std::chrono::microseconds> watchdog_interval() { return std::nullopt; }

}  // namespace baton::os
