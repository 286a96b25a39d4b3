// os/pipe_pump.h over a plain Asio pipe pair, with no child process: the line reading, its end,
// the ordered write queue, abandon(), the owner's keep-alive, and paced reading (a pace of an
// hour, so that a parked reader stays parked for the whole test unless read_now wakes it). Built
// for both platforms: on Windows the pipe's end reads as broken_pipe, which the pump must report as
// eof.
#include "os/pipe_pump.h"

#include <boost/asio/connect_pipe.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

using pump = baton::os::pipe_pump<asio::readable_pipe, asio::writable_pipe>;

// The pump between two pipes, as a process::impl holds it: `to_pump` plays the child's stdout,
// `from_pump` its stdin.
struct rig {
  asio::io_context io;
  asio::writable_pipe to_pump{io};
  asio::readable_pipe from_pump{io};
  std::shared_ptr<pump> p;

  explicit rig(std::chrono::milliseconds pace = std::chrono::milliseconds(0)) {
#ifdef SIGPIPE
    std::signal(SIGPIPE, SIG_IGN);  // as os::spawn does: a write to a closed pipe is an error
#endif
    asio::readable_pipe out(io);
    asio::writable_pipe in(io);
    asio::connect_pipe(out, to_pump);
    asio::connect_pipe(from_pump, in);
    p = std::make_shared<pump>(std::move(out), std::move(in), pace);
  }

  void send(const std::string& text) { asio::write(to_pump, asio::buffer(text)); }

  // Runs what is ready, without waiting for a timer: a few rounds, so that a read the reactor
  // has to notice first completes too.
  void settle() {
    for (int i = 0; i < 20; ++i) {
      io.restart();
      io.poll();
    }
  }

  // Everything written to the pump's stdin side, up to its close.
  std::string drain() {
    std::string all;
    error_code ec;
    asio::read(from_pump, asio::dynamic_buffer(all), ec);
    return all;
  }
};

struct lines_seen {
  std::vector<std::string> lines;
  std::vector<error_code> ends;
  baton::os::line_handler handler() {
    return [this](const error_code& ec, std::string_view line) {
      if (!ec) {
        lines.emplace_back(line);
      } else {
        ends.push_back(ec);
        lines.emplace_back(line);
      }
    };
  }
};

}  // namespace

TEST_CASE("the pump hands out whole lines, then the last one, then eof", "[unit][pipe_pump]") {
  rig r;
  lines_seen seen;
  r.p->start_reading(seen.handler(), r.p);
  asio::write(r.to_pump, asio::buffer(std::string("first\r\nsec")));
  asio::write(r.to_pump, asio::buffer(std::string("ond\nno newline")));
  r.to_pump.close();
  r.io.run();
  CHECK(seen.lines == std::vector<std::string>{"first", "second", "no newline", ""});
  REQUIRE(seen.ends.size() == 1);
  CHECK(seen.ends[0] == asio::error::eof);  // broken_pipe on Windows, reported the same
}

TEST_CASE("queued writes go out in order, each reported once", "[unit][pipe_pump]") {
  rig r;
  std::vector<std::string> done;
  r.p->write_line(
      "one", [&](const error_code& ec) { done.push_back(ec ? ec.message() : "1"); }, r.p);
  r.p->write_line(
      "two", [&](const error_code& ec) { done.push_back(ec ? ec.message() : "2"); }, r.p);
  r.p->write_line(
      "three",
      [&](const error_code& ec) {
        done.push_back(ec ? ec.message() : "3");
        r.p->close_stdin();
      },
      r.p);
  r.io.run();
  CHECK(done == std::vector<std::string>{"1", "2", "3"});
  CHECK(r.drain() == "one\ntwo\nthree\n");
}

TEST_CASE("a line queued from a write's handler goes out once", "[unit][pipe_pump]") {
  rig r;
  int done = 0;
  r.p->write_line(
      "first",
      [&](const error_code&) {
        ++done;
        r.p->write_line(
            "from the handler",
            [&](const error_code&) {
              ++done;
              r.p->close_stdin();
            },
            r.p);
      },
      r.p);
  r.io.run();
  CHECK(done == 2);
  CHECK(r.drain() == "first\nfrom the handler\n");
}

TEST_CASE("a write to a reader that is gone fails in its handler", "[unit][pipe_pump]") {
  rig r;
  r.from_pump.close();
  error_code seen;
  bool called = false;
  r.p->write_line(
      "nobody reads this",
      [&](const error_code& ec) {
        called = true;
        seen = ec;
      },
      r.p);
  r.io.run();
  CHECK(called);
  CHECK(seen);
}

TEST_CASE("after abandon no handler runs, and queued writes are dropped", "[unit][pipe_pump]") {
  rig r;
  int calls = 0;
  r.p->start_reading([&](const error_code&, std::string_view) { ++calls; }, r.p);
  r.p->write_line(
      "a", [&](const error_code&) { ++calls; }, r.p);
  r.p->write_line(
      "b", [&](const error_code&) { ++calls; }, r.p);
  r.p->abandon();
  r.io.run();
  CHECK(calls == 0);
}

TEST_CASE("the owner's keep-alive holds the pump while a read is pending", "[unit][pipe_pump]") {
  rig r;
  lines_seen seen;
  std::weak_ptr<pump> alive = r.p;
  r.p->start_reading(seen.handler(), std::exchange(r.p, nullptr));
  REQUIRE_FALSE(alive.expired());  // only the pending read holds it now
  asio::write(r.to_pump, asio::buffer(std::string("late\n")));
  r.to_pump.close();
  r.io.run();
  CHECK(seen.lines == std::vector<std::string>{"late", ""});
  CHECK(alive.expired());  // the last handler let go
}

constexpr auto an_hour = std::chrono::hours(1);

TEST_CASE("an unpaced pump hands out each line as it comes", "[unit][pipe_pump]") {
  // The control for the paced cases below: settle() alone delivers a line when nothing parks.
  rig r;
  lines_seen seen;
  r.p->start_reading(seen.handler(), r.p);
  r.send("a\n");
  r.settle();
  r.send("b\nc\n");
  r.settle();
  CHECK(seen.lines == std::vector<std::string>{"a", "b", "c"});
  r.p->abandon();
}

TEST_CASE("a paced pump parks after a trickle until read_now, then reads at once",
          "[unit][pipe_pump]") {
  rig r(an_hour);
  lines_seen seen;
  r.p->start_reading(seen.handler(), r.p);
  r.send("a\n");
  r.settle();
  REQUIRE(seen.lines == std::vector<std::string>{"a"});
  r.send("b\nc\n");
  r.settle();
  CHECK(seen.lines == std::vector<std::string>{"a"});  // parked: the kernel holds b and c
  r.p->read_now(r.p);
  r.settle();
  CHECK(seen.lines == std::vector<std::string>{"a", "b", "c"});
  // No pacing after read_now: the next trickle and the end come as they happen.
  r.send("d\n");
  r.settle();
  CHECK(seen.lines == std::vector<std::string>{"a", "b", "c", "d"});
  r.to_pump.close();
  r.io.restart();
  r.io.run();  // would wait an hour for a parked reader's tick
  CHECK(seen.lines.back().empty());
  REQUIRE(seen.ends.size() == 1);
}

TEST_CASE("a paced pump reads again at once after a big read", "[unit][pipe_pump]") {
  rig r(an_hour);
  lines_seen seen;
  r.p->start_reading(seen.handler(), r.p);
  const std::string big(baton::os::pace_below_bytes + 1000, 'x');
  r.send(big + "\n");
  r.settle();
  REQUIRE(seen.lines.size() == 1);
  CHECK(seen.lines[0].size() == big.size());
  // A chatty worker is not parked: its pipe must never fill while we wait for a tick.
  r.send("after\n");
  r.settle();
  CHECK(seen.lines.size() == 2);
  r.send("parked\n");  // the last read was a trickle: this one waits
  r.settle();
  CHECK(seen.lines.size() == 2);
  r.p->abandon();
}

TEST_CASE("abandon of a parked pump cancels its tick and lets the owner go", "[unit][pipe_pump]") {
  rig r(an_hour);
  int calls = 0;
  std::weak_ptr<pump> alive = r.p;
  r.p->start_reading([&](const error_code&, std::string_view) { ++calls; }, r.p);
  r.send("a\n");
  r.settle();
  REQUIRE(calls == 1);
  r.send("b\n");
  auto owner = std::exchange(r.p, nullptr);
  owner->abandon();
  owner.reset();
  r.io.restart();
  r.io.run();  // returns at once: the hour-long tick was cancelled
  CHECK(calls == 1);
  CHECK(alive.expired());
}

TEST_CASE("a paced stderr reader parks after a trickle until read_now", "[unit][pipe_pump]") {
  asio::io_context io;
  asio::readable_pipe out(io);
  asio::writable_pipe to_reader(io);
  asio::connect_pipe(out, to_reader);
  using reader = baton::os::chunk_reader<asio::readable_pipe>;
  auto rd = std::make_shared<reader>(std::move(out), an_hour);
  std::string got;
  bool ended = false;
  rd->start_reading(
      [&](const error_code& ec, std::string_view data) {
        if (ec) ended = true;
        got += data;
      },
      rd);
  const auto settle = [&] {
    for (int i = 0; i < 20; ++i) {
      io.restart();
      io.poll();
    }
  };
  asio::write(to_reader, asio::buffer(std::string("one ")));
  settle();
  REQUIRE(got == "one ");
  asio::write(to_reader, asio::buffer(std::string("two")));
  settle();
  CHECK(got == "one ");
  rd->read_now(rd);
  settle();
  CHECK(got == "one two");
  to_reader.close();
  io.restart();
  io.run();
  CHECK(ended);
}
