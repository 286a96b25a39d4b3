#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "os/service_notify.h"

namespace baton::os {

namespace {

status send(const std::string& message) {
  // unset_environment = 0: workers never see NOTIFY_SOCKET anyway (NotifyAccess=main), and the
  // daemon keeps notifying for its whole life.
  const int rc = sd_notify(0, message.c_str());
  if (rc < 0) return make_error("sd_notify: " + std::string(std::strerror(-rc)));
  return {};
}

// STATUS= is one line; newlines would start a new assignment.
std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

}  // namespace

bool notify_enabled() {
  const char* s = std::getenv("NOTIFY_SOCKET");
  return s != nullptr && *s != '\0';
}

status notify_ready(const std::string& status_text) {
  return send("READY=1\nSTATUS=" + one_line(status_text));
}

status notify_status(const std::string& status_text) {
  return send("STATUS=" + one_line(status_text));
}

status notify_watchdog() { return send("WATCHDOG=1"); }

status notify_stopping(const std::string& status_text) {
  return send("STOPPING=1\nSTATUS=" + one_line(status_text));
}

status notify_reloading(const std::string& status_text) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto usec = static_cast<std::uint64_t>(now.tv_sec) * 1000000u +
                    static_cast<std::uint64_t>(now.tv_nsec) / 1000u;
  return send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) +
              "\nSTATUS=" + one_line(status_text));
}

status notify_extend_timeout(std::chrono::microseconds more) {
  return send("EXTEND_TIMEOUT_USEC=" + std::to_string(more.count()));
}

std::optional<std::chrono::microseconds> watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return std::chrono::microseconds(usec);
  return std::nullopt;
}

}  // namespace baton::os
