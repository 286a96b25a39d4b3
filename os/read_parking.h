// The parking half of paced reading (os/pipe_pump.h, "Paced reading"), shared by pipe_pump and
// chunk_reader: after a read that brought a trickle, the reader waits for the next multiple of
// the pace on the steady clock, so every parked reader of the io_context (and every RSS timer
// on the same tick) is served in one wakeup.
// Ownership: the reader owns its read_parking; a parked reader's keep-alive is held by the
// pending timer handler, exactly as by a pending read. One io_context thread; no locking.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

namespace baton::os {

// The next multiple of `period` on the steady clock after `now`: the shared tick of the
// supervisor's periodic work (parked readers here, the job runner's RSS samples), so that
// everything due on one tick is served in one wakeup.
inline std::chrono::steady_clock::time_point next_tick(std::chrono::steady_clock::time_point now,
                                                       std::chrono::milliseconds period) {
  using clock = std::chrono::steady_clock;
  if (period.count() <= 0) return now;
  const auto since_epoch =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  return clock::time_point(period * (since_epoch / period + 1));
}

// A read that brought less than this parks a paced reader until the next tick; a bigger one
// means a chatty worker, read again at once so that its pipe never fills.
inline constexpr std::size_t pace_below_bytes = 16 * 1024;

class read_parking {
 public:
  using keep_alive = std::shared_ptr<const void>;

  template <class Executor>
  read_parking(const Executor& ex, std::chrono::milliseconds pace) : timer_(ex), pace_(pace) {}

  // Whether a read of n bytes should park the reader rather than read again at once.
  bool should_park(std::size_t n) const { return pace_.count() > 0 && n < pace_below_bytes; }

  // Parks until the next tick, then calls resume(owner); a later wake_now() or stop() wins.
  template <class Resume>
  void park(keep_alive owner, Resume resume) {
    parked_ = true;
    timer_.expires_at(next_tick(std::chrono::steady_clock::now(), pace_));
    timer_.async_wait([this, owner = std::move(owner), resume = std::move(resume)](
                          const boost::system::error_code&) mutable noexcept {
      if (!parked_) return;  // woken or stopped meanwhile
      parked_ = false;
      resume(std::move(owner));
    });
  }

  // Ends the pacing for good; true when the reader was parked and must read now.
  bool wake_now() {
    pace_ = std::chrono::milliseconds(0);
    if (!parked_) return false;
    parked_ = false;
    timer_.cancel();
    return true;
  }

  void stop() {
    parked_ = false;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  std::chrono::milliseconds pace_;
  bool parked_ = false;
};

}  // namespace baton::os
