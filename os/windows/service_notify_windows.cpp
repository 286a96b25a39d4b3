// Windows has no notify socket: the service reports to the SCM through SetServiceStatus, so
// every systemd notification is a no-op here.
#include "os/service_notify.h"

namespace baton::os {

bool notify_enabled() { return false; }
status notify_ready(const std::string&) { return {}; }
status notify_status(const std::string&) { return {}; }
status notify_watchdog() { return {}; }
status notify_stopping(const std::string&) { return {}; }
status notify_extend_timeout(std::chrono::microseconds) { return {}; }
std::optional<std::chrono::microseconds> watchdog_interval() { return std::nullopt; }

}  // namespace baton::os
