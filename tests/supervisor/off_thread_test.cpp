#include "supervisor/off_thread.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "support/gate.h"

using namespace baton::supervisor;
using namespace std::chrono_literals;

using baton::test::gate;

TEST_CASE("run_off_thread hands the work's result back on the io thread", "[unit][off_thread]") {
  boost::asio::io_context io;
  const auto io_thread = std::this_thread::get_id();
  std::thread::id work_thread;
  std::optional<baton::result<int>> got;
  std::thread::id done_thread;
  run_off_thread<int>(
      io, 5s, "sum",
      [&]() -> baton::result<int> {
        work_thread = std::this_thread::get_id();
        return 42;
      },
      [&](baton::result<int> r) {
        done_thread = std::this_thread::get_id();
        got = std::move(r);
      });
  io.run_for(5s);  // returns early: nothing is left once the result is in
  REQUIRE(got);
  REQUIRE(*got);
  CHECK(**got == 42);
  CHECK(work_thread != io_thread);
  CHECK(done_thread == io_thread);
}

TEST_CASE("run_off_thread reports an error or an exception of the work as a value",
          "[unit][off_thread]") {
  boost::asio::io_context io;
  std::optional<baton::result<int>> failed, threw;
  run_off_thread<int>(
      io, 5s, "a", []() -> baton::result<int> { return baton::make_error("bad file"); },
      [&](baton::result<int> r) { failed = std::move(r); });
  run_off_thread<int>(
      io, 5s, "b", []() -> baton::result<int> { throw std::runtime_error("bad_alloc-ish"); },
      [&](baton::result<int> r) { threw = std::move(r); });
  io.run_for(5s);
  REQUIRE(failed);
  REQUIRE_FALSE(*failed);
  CHECK(failed->error().message == "bad file");
  REQUIRE(threw);
  REQUIRE_FALSE(*threw);
  CHECK(threw->error().message == "b: bad_alloc-ish");
}

TEST_CASE("run_off_thread gives up at the deadline and drops the late result",
          "[unit][off_thread]") {
  boost::asio::io_context io;
  auto g = std::make_shared<gate>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  int calls = 0;
  std::optional<baton::result<int>> got;
  const auto start = std::chrono::steady_clock::now();
  run_off_thread<int>(
      io, 100ms, "read /x",
      [g, finished]() -> baton::result<int> {
        g->wait();  // a read stuck in the kernel
        finished->store(true);
        return 1;
      },
      [&](baton::result<int> r) {
        ++calls;
        got = std::move(r);
      });
  io.run_for(5s);  // the timer is the only thing left: it returns right after the deadline
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(got);
  REQUIRE_FALSE(*got);
  CHECK_THAT(got->error().message, Catch::StartsWith("read /x: timed out after 100 ms"));
  CHECK(took < 2s);
  g->release();
  for (int i = 0; i < 200 && !finished->load(); ++i) std::this_thread::sleep_for(5ms);
  CHECK(finished->load());
  io.restart();
  io.run_for(50ms);
  CHECK(calls == 1);
}

TEST_CASE("an abandoned call never reaches its handler", "[unit][off_thread]") {
  boost::asio::io_context io;
  auto g = std::make_shared<gate>();
  int calls = 0;
  auto call = run_off_thread<int>(
      io, 5s, "x",
      [g]() -> baton::result<int> {
        g->wait();
        return 1;
      },
      [&](baton::result<int>) { ++calls; });
  call.abandon();
  g->release();
  io.run_for(200ms);
  CHECK(calls == 0);
  call.abandon();  // twice is harmless
}
