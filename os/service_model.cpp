#include "os/service_model.h"

#include <algorithm>
#include <limits>

namespace baton::os {

namespace {
std::uint32_t clamp_ms(std::chrono::milliseconds ms) {
  const auto max = static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(ms.count(), 0, max));
}
}  // namespace

service_action action_for_control(std::uint32_t control) {
  switch (control) {
    case scm::control_stop:
    case scm::control_shutdown:
    case scm::control_preshutdown:
      return service_action::drain;
    case scm::control_paramchange:
      return service_action::reload;
    case scm::control_interrogate:
      return service_action::report_status;
    default:
      return service_action::not_implemented;
  }
}

service_status_report service_status_model::starting() {
  if (started_) return current_;
  started_ = true;
  current_ = {};
  current_.state = scm::state_start_pending;
  current_.checkpoint = 1;
  current_.wait_hint_ms = clamp_ms(start_wait_hint);
  return current_;
}

service_status_report service_status_model::ready() {
  const bool ending =
      current_.state == scm::state_stop_pending || current_.state == scm::state_stopped;
  if (started_ && ending) return current_;
  started_ = true;
  current_ = {};
  current_.state = scm::state_running;
  current_.controls_accepted = running_controls;
  return current_;
}

service_status_report service_status_model::stop_pending(std::chrono::milliseconds wait_hint) {
  if (current_.state == scm::state_stopped && started_) return current_;
  started_ = true;
  const bool already = current_.state == scm::state_stop_pending;
  const auto checkpoint = already ? current_.checkpoint + 1 : 1;
  current_ = {};
  current_.state = scm::state_stop_pending;
  current_.checkpoint = checkpoint;
  current_.wait_hint_ms = clamp_ms(wait_hint);
  return current_;
}

service_status_report service_status_model::stopping() { return stop_pending(stop_wait_hint); }

service_status_report service_status_model::extend(std::chrono::milliseconds more) {
  return stop_pending(more);
}

service_status_report service_status_model::stopped(int exit_code) {
  if (current_.state == scm::state_stopped && started_) return current_;
  started_ = true;
  current_ = {};
  current_.state = scm::state_stopped;
  if (exit_code != 0) {
    current_.win32_exit_code = scm::error_service_specific;
    current_.service_exit_code = static_cast<std::uint32_t>(exit_code);
  }
  return current_;
}

stop_wait::verdict stop_wait::observe(const service_status_report& status, clock::time_point now) {
  if (status.state == scm::state_stopped) return verdict::stopped;
  if (!seen_ || status.state != state_ || status.checkpoint != checkpoint_) {
    seen_ = true;
    state_ = status.state;
    checkpoint_ = status.checkpoint;
    progress_at_ = now;
    return verdict::waiting;
  }
  // A running service that ignores the stop request hangs the same way.
  const auto allowed = std::chrono::milliseconds(status.wait_hint_ms) + slack;
  return now - progress_at_ > allowed ? verdict::hung : verdict::waiting;
}

}  // namespace baton::os
