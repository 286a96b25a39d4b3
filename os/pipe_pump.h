// The supervisor's end of a worker's stdout and stdin pipes, shared by os/posix/process_posix.cpp
// and os/windows/process_windows.cpp: stdout is read in chunks, split into lines (line_splitter)
// and handed to one line_handler; stdin lines are queued and written one at a time, in order.
// A template over the Asio stream types (readable_pipe/writable_pipe on POSIX, stream_handle on
// Windows) so that each platform keeps only how it makes the pipes.
// Ownership: the pump owns both streams and its owner (a process::impl) owns the pump. The pump
// holds no reference to its owner: each call that starts I/O takes a keep-alive of the owner,
// which every pending handler holds, so the pump, its streams and its buffer outlive any
// operation in flight, exactly as when the owner's handlers held the owner themselves.
// Everything runs on one io_context thread; no locking.
// chunk_reader, below, is the supervisor's end of a worker's stderr pipe: no lines, only chunks
// of at most 64 KiB handed on as they are read, so a flood costs one buffer and the next read
// starts only after the handler has dealt with the last chunk (the worker blocks in write() when
// the pipe is full, never the supervisor).
// Paced reading (read_pace, both classes): a worker that reports ten times a second woke the
// daemon ten times a second, and with eight workers those 80 wakeups were most of its CPU (each
// one runs with cold caches: a progress line costs 5 us to parse in a loop and ~50 us in the
// daemon). With a pace, a read that brought a trickle (under pace_below_bytes) parks the reader
// until the next multiple of the pace on the steady clock, the tick that the RSS timers of
// supervisor/job_runner.cpp use too: the io_context then serves every parked reader and every
// sample in one wakeup, and each read takes all the lines that came meanwhile. The kernel holds
// them (a pipe holds 64 KiB, four times pace_below_bytes), so the worker never blocks on a
// paced pipe; a bigger read is followed by the next one at once. Nothing the supervisor sends
// waits on a worker's line, so the pace delays only when a line is handled, by one tick at most,
// and read_now() (the worker exited) ends the pacing so its last lines and the end of its
// output are read at once.
#pragma once

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "os/line_splitter.h"
#include "os/process.h"
#include "os/read_parking.h"

namespace baton::os {

template <class ReadStream, class WriteStream>
class pipe_pump {
 public:
  using keep_alive = std::shared_ptr<const void>;

  // pace 0: every read follows the last at once (see "Paced reading" above).
  pipe_pump(ReadStream from_child, WriteStream to_child,
            std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : out_(std::move(from_child)),
        in_(std::move(to_child)),
        parking_(out_.get_executor(), pace) {}

  // Starts reading stdout; call once. on_line is called as os/process.h's line_handler says.
  void start_reading(line_handler on_line, keep_alive owner) {
    on_line_ = std::move(on_line);
    read_more(std::move(owner));
  }

  // Queues `line` plus '\n'; on_done gets the outcome once it is written (or fails).
  void write_line(std::string line, write_handler on_done, keep_alive owner) {
    line.push_back('\n');
    writes_.emplace_back(std::move(line), std::move(on_done));
    if (writes_.size() == 1) write_front(std::move(owner));
  }

  void close_stdin() {
    boost::system::error_code ignored;
    in_.close(ignored);
  }

  // Stops pacing: a parked reader reads at once, and every later read follows the last at once.
  // For the owner when the child has exited: its last lines and its EOF are wanted now.
  void read_now(keep_alive owner) {
    if (parking_.wake_now() && !abandoned_) read_more(std::move(owner));
  }

  // For the owner's destructor: no handler is called any more (not even with
  // operation_aborted), queued writes are dropped, and both pipes are closed.
  void abandon() {
    abandoned_ = true;
    on_line_ = nullptr;
    writes_.clear();
    parking_.stop();
    boost::system::error_code ignored;
    out_.close(ignored);
    in_.close(ignored);
  }

 private:
  using error_code = boost::system::error_code;

  void read_more(keep_alive owner) {
    out_.async_read_some(
        boost::asio::buffer(chunk_),
        [this, owner = std::move(owner)](error_code ec, std::size_t n) mutable noexcept {
          // Windows reports the writer's close as broken_pipe (POSIX read() never fails with
          // EPIPE): either way it is the end of the output.
          if (ec == boost::asio::error::broken_pipe) ec = boost::asio::error::eof;
          on_read(ec, n, std::move(owner));
        });
  }

  void deliver(const error_code& ec, std::string_view line) {
    if (on_line_ && !abandoned_) on_line_(ec, line);
  }

  void on_read(error_code ec, std::size_t n, keep_alive owner) {
    // A handler may abandon the process (destroy it) from inside a line: stop at once then.
    splitter_.feed(std::string_view(chunk_.data(), n),
                   [this](const error_code& e, std::string_view line) {
                     deliver(e, line);
                     return !abandoned_;
                   });
    if (abandoned_) return;
    if (ec) {
      splitter_.finish([this](const error_code& e, std::string_view line) {
        deliver(e, line);
        return true;
      });
      auto h = std::exchange(on_line_, nullptr);
      if (h) h(ec, {});
      return;
    }
    if (parking_.should_park(n)) {
      parking_.park(std::move(owner), [this](keep_alive o) { read_more(std::move(o)); });
      return;
    }
    read_more(std::move(owner));
  }

  void write_front(keep_alive owner) {
    boost::asio::async_write(
        in_, boost::asio::buffer(writes_.front().first),
        [this, owner = std::move(owner)](error_code ec, std::size_t) mutable noexcept {
          if (abandoned_ || writes_.empty()) return;
          auto done = std::move(writes_.front().second);
          writes_.pop_front();
          // The next write starts before `done` runs: a line that `done` queues then either
          // waits its turn or, on an empty queue, starts itself; never both, or it goes twice.
          if (!writes_.empty()) write_front(owner);
          if (done) done(ec);
        });
  }

  ReadStream out_;
  WriteStream in_;
  read_parking parking_;
  bool abandoned_ = false;

  std::array<char, 64 * 1024> chunk_{};
  line_splitter splitter_{max_line_bytes};
  line_handler on_line_;
  std::deque<std::pair<std::string, write_handler>> writes_;
};

// Reads one pipe to its end in chunks, for stderr. The same ownership as pipe_pump: the owner
// owns the reader, every pending read holds the owner's keep-alive.
template <class ReadStream>
class chunk_reader {
 public:
  using keep_alive = std::shared_ptr<const void>;

  explicit chunk_reader(ReadStream from_child,
                        std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : from_(std::move(from_child)), parking_(from_.get_executor(), pace) {}

  // Starts reading; call once. on_chunk is called as os/process.h's chunk_handler says.
  void start_reading(chunk_handler on_chunk, keep_alive owner) {
    on_chunk_ = std::move(on_chunk);
    read_more(std::move(owner));
  }

  // As pipe_pump::read_now.
  void read_now(keep_alive owner) {
    if (parking_.wake_now() && !abandoned_) read_more(std::move(owner));
  }

  // No handler is called any more and the pipe is closed: a descendant that still holds the
  // write end then gets EPIPE, and nothing of ours waits for it.
  void abandon() {
    abandoned_ = true;
    on_chunk_ = nullptr;
    parking_.stop();
    boost::system::error_code ignored;
    from_.close(ignored);
  }

 private:
  using error_code = boost::system::error_code;

  void read_more(keep_alive owner) {
    from_.async_read_some(
        boost::asio::buffer(chunk_),
        [this, owner = std::move(owner)](error_code ec, std::size_t n) mutable noexcept {
          if (abandoned_) return;
          if (ec == boost::asio::error::broken_pipe) ec = boost::asio::error::eof;
          if (n > 0 && on_chunk_) on_chunk_({}, std::string_view(chunk_.data(), n));
          if (abandoned_) return;  // the handler destroyed the process
          if (ec) {
            auto h = std::exchange(on_chunk_, nullptr);
            if (h) h(ec, {});
            return;
          }
          if (parking_.should_park(n)) {
            parking_.park(std::move(owner), [this](keep_alive o) { read_more(std::move(o)); });
            return;
          }
          read_more(std::move(owner));
        });
  }

  ReadStream from_;
  read_parking parking_;
  bool abandoned_ = false;
  std::array<char, 64 * 1024> chunk_{};
  chunk_handler on_chunk_;
};

}  // namespace baton::os
