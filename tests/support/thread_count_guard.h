// Puts the worker's thread count back when a test that changes it ends, even by a failed REQUIRE
// (which throws), so that the tests after it run with the count they expect.
#pragma once

#include "worker/parallel.h"

namespace baton::worker::testing {

class thread_count_guard {
 public:
  thread_count_guard() : before_(thread_count()) {}
  ~thread_count_guard() { set_thread_count(before_); }
  thread_count_guard(const thread_count_guard&) = delete;
  thread_count_guard& operator=(const thread_count_guard&) = delete;

 private:
  int before_;
};

}  // namespace baton::worker::testing
