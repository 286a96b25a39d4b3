#include "supervisor/off_thread_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "support/gate.h"

using baton::supervisor::off_thread_pool;
using namespace std::chrono_literals;

using baton::test::gate;

namespace {

// Waits for `f`, at most 10 s (a hang fails the test instead of the run).
template <class T>
T take(std::future<T>& f) {
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

}  // namespace

TEST_CASE("the pool reuses a free thread instead of starting another", "[unit][off_thread]") {
  auto* pool = new off_thread_pool(8);  // leaked like the shared one: its threads never end
  std::set<std::thread::id> seen;
  for (int i = 0; i < 20; ++i) {
    std::promise<std::thread::id> p;
    auto f = p.get_future();
    REQUIRE(pool->submit([&p] { p.set_value(std::this_thread::get_id()); }));
    seen.insert(take(f));
    // The next task is submitted only once this one's thread waits again.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (pool->idle() != pool->threads() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
  }
  CHECK(pool->threads() == 1);
  CHECK(seen.size() == 1);
}

TEST_CASE("a stuck task does not delay the next: a new thread takes it", "[unit][off_thread]") {
  auto* pool = new off_thread_pool(8);
  auto g = std::make_shared<gate>();
  REQUIRE(pool->submit([g] { g->wait(); }));
  std::promise<void> p;
  auto f = p.get_future();
  REQUIRE(pool->submit([&p] { p.set_value(); }));
  take(f);
  CHECK(pool->threads() == 2);
  g->release();
}

TEST_CASE("past the cap, work waits for the first thread to come free", "[unit][off_thread]") {
  auto* pool = new off_thread_pool(2);
  auto g = std::make_shared<gate>();
  std::atomic<int> started{0};
  for (int i = 0; i < 2; ++i) {
    REQUIRE(pool->submit([g, &started] {
      ++started;
      g->wait();
    }));
  }
  std::promise<void> p;
  auto f = p.get_future();
  REQUIRE(pool->submit([&p] { p.set_value(); }));
  CHECK(f.wait_for(100ms) == std::future_status::timeout);  // both threads are held
  CHECK(pool->threads() == 2);
  g->release();
  take(f);
  CHECK(started == 2);
}
