// A gate that tasks wait on until the test opens it, so a test decides when (and whether) work
// on another thread finishes. Opened once; every waiter, earlier or later, then passes.
#pragma once

#include <condition_variable>
#include <mutex>

namespace baton::test {

struct gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

}  // namespace baton::test
