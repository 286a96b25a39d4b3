// Work the io thread must never do itself: reading and hashing files a worker controls (a
// checkpoint it announced, a folder to seal, the checkpoint folder before a spawn). run_off_thread
// runs `work` on a thread of the process's off_thread_pool and hands the result back on the
// io_context's thread, or a "timed out" error once `deadline` passes, whichever comes first;
// exactly one of the two reaches `done`. A call whose work outlives its deadline (a read stuck in
// the kernel) is abandoned, never waited for: its thread finishes on its own (and is kept for later
// work) and its result is dropped, so nothing the io thread does can block on it. The caller owns
// `done` and the abandon handle, and must call abandon() before its io_context is destroyed
// (job_runner does, in its destructor): queued work may run late, and posts to the io_context
// unless abandoned. The work owns copies of what it reads and must only touch objects that
// outlive it (the process-wide env in the daemon).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "base/status.h"
#include "supervisor/off_thread_pool.h"

namespace baton::supervisor {

// Cancels a call: `done` is not called any more, and a result that arrives later is dropped.
// Idempotent; call it on the io thread. A call abandoned by its deadline needs no handle call.
class off_thread_call {
 public:
  off_thread_call() = default;
  void abandon() {
    if (auto s = shared_.lock()) s->abandon();
  }

  // Shared by the io side and the work's thread: after abandon() nothing is posted to the io
  // context any more, so an io_context destroyed after it never receives a late result.
  struct shared_state {
    std::mutex mu;
    bool abandoned = false;
    std::function<void()> on_abandon;  // io side: stops the deadline timer
    void abandon() {
      std::function<void()> f;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (abandoned) return;
        abandoned = true;
        f = std::move(on_abandon);
      }
      if (f) f();
    }
  };
  explicit off_thread_call(std::weak_ptr<shared_state> s) : shared_(std::move(s)) {}

 private:
  std::weak_ptr<shared_state> shared_;
};

// A failed result<T>, spelled out: a T that is itself constructible from an error (an aggregate
// holding a result) would make the plain conversion ambiguous.
template <class T>
result<T> failed(std::string message) {
  return result<T>(boost::system::in_place_error, make_error(std::move(message)));
}

template <class T>
off_thread_call run_off_thread(boost::asio::io_context& io, std::chrono::milliseconds deadline,
                               std::string what, std::function<result<T>()> work,
                               std::function<void(result<T>)> done) {
  using shared_state = off_thread_call::shared_state;
  // The io side: the timer and `done`. Alive while the timer waits (its handler holds it).
  struct io_side {
    explicit io_side(boost::asio::io_context& c) : timer(c) {}
    boost::asio::steady_timer timer;
    std::function<void(result<T>)> done;
    bool finished = false;
    void finish(result<T> r) {
      if (finished) return;
      finished = true;
      timer.cancel();
      auto d = std::move(done);
      if (d) d(std::move(r));
    }
  };
  auto side = std::make_shared<io_side>(io);
  side->done = std::move(done);
  auto shared = std::make_shared<shared_state>();
  std::weak_ptr<io_side> weak_side = side;
  shared->on_abandon = [weak_side] {
    if (auto s = weak_side.lock()) {
      s->finished = true;
      s->done = nullptr;
      s->timer.cancel();
    }
  };
  side->timer.expires_after(deadline);
  side->timer.async_wait([side, shared, deadline, what](const boost::system::error_code& ec) {
    if (ec || side->finished) return;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->abandoned = true;
      shared->on_abandon = nullptr;
    }
    side->finish(failed<T>(what + ": timed out after " + std::to_string(deadline.count()) +
                           " ms (abandoned; the daemon does not wait for it)"));
  });
  auto task = [&io, shared, weak_side, work = std::move(work), what]() mutable {
    {
      // Queued behind stuck reads past its deadline: not worth doing any more.
      std::lock_guard<std::mutex> lock(shared->mu);
      if (shared->abandoned) return;
    }
    result<T> r = failed<T>(what + ": not run");
    try {
      r = work();
    } catch (const std::exception& ex) {
      r = failed<T>(what + ": " + ex.what());
    } catch (...) {
      r = failed<T>(what + ": unknown exception");
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->abandoned) return;
    // Posted under the lock: abandon() (on the io thread, while the io_context is alive) cannot
    // slip in between the check and the post.
    boost::asio::post(io, [weak_side, r = std::move(r)]() mutable {
      if (auto s = weak_side.lock()) s->finish(std::move(r));
    });
  };
  if (auto s = off_thread_pool::shared().submit(std::move(task)); !s) {
    // Handed back like any result: never from inside the caller's own call.
    boost::asio::post(io, [weak_side, why = what + ": " + s.error().message] {
      if (auto side_now = weak_side.lock()) side_now->finish(failed<T>(why));
    });
  }
  return off_thread_call(shared);
}

}  // namespace baton::supervisor
