// Windows stop requests arrive as console control events on a thread the system creates for
// the handler; the flag is a lock-free atomic, so the worker's step loop just polls it.
#include <atomic>

#include "os/stop_signal.h"
#include "os/windows/win_util.h"

namespace baton::os {

namespace {
std::atomic<bool> flag{false};
static_assert(std::atomic<bool>::is_always_lock_free);

BOOL WINAPI on_console_event(DWORD event) {
  switch (event) {
    case CTRL_C_EVENT:
    case CTRL_BREAK_EVENT:
      flag.store(true, std::memory_order_relaxed);
      return TRUE;  // handled: the process keeps running and stops at the next step boundary
    case CTRL_CLOSE_EVENT:
    case CTRL_LOGOFF_EVENT:
    case CTRL_SHUTDOWN_EVENT:
      // For these the system ends the process as soon as the handler returns; blocking here is
      // how a console program gets its grace period (about 5 s) to checkpoint. main() returning
      // ends the process and this thread with it.
      flag.store(true, std::memory_order_relaxed);
      ::Sleep(INFINITE);
      return TRUE;
    default:
      return FALSE;
  }
}
}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    ::SetConsoleCtrlHandler(on_console_event, TRUE);
    return true;
  }();
  (void)installed;
}

bool stop_requested() { return flag.load(std::memory_order_relaxed); }

void request_stop() { flag.store(true, std::memory_order_relaxed); }

}  // namespace baton::os
