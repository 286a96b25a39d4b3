#include "supervisor/off_thread_pool.h"

#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace baton::supervisor {

off_thread_pool::off_thread_pool(std::size_t max_threads)
    : max_threads_(max_threads == 0 ? 1 : max_threads) {}

off_thread_pool& off_thread_pool::shared() {
  // Leaked on purpose (see the header): kept threads may be blocked at exit.
  static auto* pool = new off_thread_pool(64);
  return *pool;
}

status off_thread_pool::submit(std::function<void()> task) {
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    // Idle threads already promised to earlier queued tasks do not count as free.
    if (queue_.size() > idle_ && threads_ < max_threads_) {
      ++threads_;
      start = true;
    }
  }
  if (!start) {
    ready_.notify_one();
    return {};
  }
  try {
    std::thread([this] { run(); }).detach();
  } catch (const std::exception& ex) {  // std::system_error, or std::bad_alloc
    std::lock_guard<std::mutex> lock(mu_);
    --threads_;
    // A kept thread will take the task when it comes free; with none, nothing ever would.
    if (threads_ > 0) return {};
    queue_.pop_back();
    return make_error(std::string("cannot start a thread: ") + ex.what());
  }
  return {};
}

std::size_t off_thread_pool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

std::size_t off_thread_pool::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

void off_thread_pool::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      ++idle_;
      ready_.wait(lock, [this] { return !queue_.empty(); });
      --idle_;
    }
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // what the task holds is released before the thread waits again
    lock.lock();
  }
}

}  // namespace baton::supervisor
