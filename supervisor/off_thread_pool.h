// The threads that run_off_thread (off_thread.h) hands its work to. A thread, once started, is
// kept for the life of the process and reused: starting a thread while another exits deadlocks
// now and then under wine's winpthreads (the new thread never runs; seen as a checkpoint read
// that never began), and a thread per read is wasted work everywhere. A new thread is started
// only when every kept one is busy, so work stuck in the kernel (abandoned by its deadline)
// never delays the next; `max_threads` bounds how many such stuck reads the process can hold.
// One process-wide pool (shared()), never destroyed: its threads may still be blocked when the
// process exits, and must not outlive a destroyed mutex.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include "base/status.h"

namespace baton::supervisor {

class off_thread_pool {
 public:
  explicit off_thread_pool(std::size_t max_threads);
  off_thread_pool(const off_thread_pool&) = delete;
  off_thread_pool& operator=(const off_thread_pool&) = delete;

  // The process's pool (64 threads at most), created on first use.
  static off_thread_pool& shared();

  // Runs `task` on a kept thread, starting one if none is free and the cap allows; otherwise it
  // waits for the first thread to come free. An error only when no thread exists and none can be
  // started; `task` is then dropped. `task` must not throw (run_off_thread catches).
  status submit(std::function<void()> task);

  std::size_t threads() const;  // started so far
  std::size_t idle() const;     // waiting for work now

 private:
  void run();

  const std::size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  std::size_t threads_ = 0;
  std::size_t idle_ = 0;
};

}  // namespace baton::supervisor
