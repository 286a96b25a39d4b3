// The Windows Service Control Manager's rules as plain data: what each control request means to
// the daemon, the SERVICE_STATUS a service reports at each stage of its life, and when a caller
// waiting for a stop should call the service hung. Pure code with the Win32 values spelled out
// (os/windows/service_host_windows.cpp static_asserts them against winsvc.h), so the rules are
// unit-tested on every platform; the Windows host feeds it and passes its reports on.
#pragma once

#include <chrono>
#include <cstdint>

namespace baton::os {

namespace scm {
// SERVICE_CONTROL_*
inline constexpr std::uint32_t control_stop = 0x01;
inline constexpr std::uint32_t control_pause = 0x02;
inline constexpr std::uint32_t control_continue = 0x03;
inline constexpr std::uint32_t control_interrogate = 0x04;
inline constexpr std::uint32_t control_shutdown = 0x05;
inline constexpr std::uint32_t control_paramchange = 0x06;
inline constexpr std::uint32_t control_preshutdown = 0x0F;
// SERVICE_STOPPED ... SERVICE_RUNNING
inline constexpr std::uint32_t state_stopped = 1;
inline constexpr std::uint32_t state_start_pending = 2;
inline constexpr std::uint32_t state_stop_pending = 3;
inline constexpr std::uint32_t state_running = 4;
// SERVICE_ACCEPT_*
inline constexpr std::uint32_t accept_stop = 0x001;
inline constexpr std::uint32_t accept_shutdown = 0x004;
inline constexpr std::uint32_t accept_paramchange = 0x008;
inline constexpr std::uint32_t accept_preshutdown = 0x100;
// Win32 error codes a service reports or returns from its control handler.
inline constexpr std::uint32_t no_error = 0;
inline constexpr std::uint32_t error_call_not_implemented = 120;
inline constexpr std::uint32_t error_service_specific = 1066;
}  // namespace scm

// What the daemon does for a control request.
enum class service_action {
  drain,            // stop, shutdown, preshutdown: workers checkpoint, states saved, exit 0
  reload,           // paramchange: re-read the settings file, as SIGHUP does
  report_status,    // interrogate: report the current status again
  not_implemented,  // pause, continue, anything else: refused with ERROR_CALL_NOT_IMPLEMENTED
};

service_action action_for_control(std::uint32_t control);

// The fields of SERVICE_STATUS a service chooses (the type is always SERVICE_WIN32_OWN_PROCESS).
struct service_status_report {
  std::uint32_t state = scm::state_stopped;
  std::uint32_t controls_accepted = 0;
  std::uint32_t win32_exit_code = scm::no_error;
  std::uint32_t service_exit_code = 0;
  std::uint32_t checkpoint = 0;
  std::uint32_t wait_hint_ms = 0;
  friend bool operator==(const service_status_report&, const service_status_report&) = default;
};

// START_PENDING -> RUNNING -> STOP_PENDING (checkpoint advancing) -> STOPPED. Each call returns
// the status to report now. It only moves forward: a late ready() while stopping (a reload that
// ends during a stop) changes nothing, and nothing follows stopped().
class service_status_model {
 public:
  // Recovery of every job happens before the daemon is ready, in one go on its thread.
  static constexpr std::chrono::milliseconds start_wait_hint{60000};
  // Until the daemon says how long its workers may still take (extend()).
  static constexpr std::chrono::milliseconds stop_wait_hint{30000};
  static constexpr std::uint32_t running_controls =
      scm::accept_stop | scm::accept_shutdown | scm::accept_preshutdown | scm::accept_paramchange;

  service_status_report starting();
  service_status_report ready();
  // Shutdown began; also what the host reports the moment a drain request arrives.
  service_status_report stopping();
  // Still stopping (workers checkpointing): the checkpoint advances, the wait hint becomes `more`.
  service_status_report extend(std::chrono::milliseconds more);
  // 0: a clean stop. Anything else is a failure the SCM's recovery actions react to:
  // ERROR_SERVICE_SPECIFIC_ERROR with the exit code as the service-specific code.
  service_status_report stopped(int exit_code);

  const service_status_report& current() const { return current_; }

 private:
  service_status_report stop_pending(std::chrono::milliseconds wait_hint);
  service_status_report current_;
  bool started_ = false;
};

// For a caller waiting for a service to stop (`baton service uninstall`): the SCM's contract is
// that a pending service advances its checkpoint within each wait hint, so a checkpoint that
// stands still longer than its wait hint (plus some slack) means the service hung.
class stop_wait {
 public:
  enum class verdict { stopped, waiting, hung };
  static constexpr std::chrono::milliseconds slack{5000};
  using clock = std::chrono::steady_clock;

  verdict observe(const service_status_report& status, clock::time_point now);

 private:
  bool seen_ = false;
  std::uint32_t state_ = 0, checkpoint_ = 0;
  clock::time_point progress_at_{};
};

}  // namespace baton::os
