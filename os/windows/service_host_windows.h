// What os/windows/service_notify_windows.cpp needs from the service host: whether a service body
// runs in this process, and the status reports its notify calls turn into. Private to
// os/windows/; the host (service_host_windows.cpp) owns the SCM handle and the status model.
#pragma once

#include <chrono>

#include "base/status.h"

namespace baton::os::win {

bool service_hosted();
// Each reports the next status through SetServiceStatus; a no-op when no service body runs.
status service_report_ready();
status service_report_stopping();
status service_report_extend(std::chrono::milliseconds more);

}  // namespace baton::os::win
