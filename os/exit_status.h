// How a child process ended: a normal exit with a code, or death by a signal. A plain value with
// no OS headers so the pure supervisor logic (supervisor/job_machine.h) can reason about exits
// without depending on Asio or the platform. os/process.h produces it; nothing else does.
#pragma once

#include <string>

namespace baton::os {

struct exit_status {
  enum class kind { exited, signaled };
  kind how = kind::exited;
  int code = 0;  // the exit code, or the signal number when `how == signaled`

  static exit_status exited(int code) { return {kind::exited, code}; }
  static exit_status signaled(int signal) { return {kind::signaled, signal}; }

  bool success() const { return how == kind::exited && code == 0; }
  bool killed_by_signal() const { return how == kind::signaled; }
  // "exit code 3" or "signal 6": the wording used in job diagnoses.
  std::string describe() const {
    return (how == kind::exited ? "exit code " : "signal ") + std::to_string(code);
  }
  friend bool operator==(const exit_status&, const exit_status&) = default;
};

}  // namespace baton::os
