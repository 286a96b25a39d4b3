// Windows has no notify socket: the Windows service reports through SetServiceStatus, so every
// call here is the documented no-op of a daemon that no manager listens to.
#include "os/service_notify.h"

namespace baton::os {

bool notify_enabled() { return false; }
status notify_ready(const std::string&) { return {}; }
status notify_status(const std::string&) { return {}; }
status notify_watchdog() { return {}; }
status notify_stopping(const std::string&) { return {}; }
status notify_reloading(const std::string&) { return {}; }
status notify_extend_timeout(std::chrono::microseconds) { return {}; }
std::optional<std::chrono::microseconds> watchdog_interval() { return std::nullopt; }

}  // namespace baton::os
