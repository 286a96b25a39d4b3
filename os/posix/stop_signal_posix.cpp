#include <signal.h>

#include <atomic>

#include "os/stop_signal.h"

namespace baton::os {

namespace {
// Lock-free atomics are async-signal-safe; static_assert keeps it honest.
std::atomic<bool> flag{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int) { flag.store(true, std::memory_order_relaxed); }
}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    return true;
  }();
  (void)installed;
}

bool stop_requested() { return flag.load(std::memory_order_relaxed); }

void request_stop() { flag.store(true, std::memory_order_relaxed); }

}  // namespace baton::os
