// The shared tick of os/read_parking.h: parked readers and the job runner's RSS samples wake on
// the same multiples of their period, so that one wakeup serves them all. (The parking itself is
// exercised through pipe_pump_test's paced cases, with real pipes.)
#include "os/read_parking.h"

#include <catch2/catch.hpp>
#include <chrono>

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using baton::os::next_tick;

namespace {
clock_type::time_point at(std::chrono::milliseconds ms) { return clock_type::time_point(ms); }
}  // namespace

TEST_CASE("next_tick is the next multiple of the period, strictly after now",
          "[unit][read_parking]") {
  CHECK(next_tick(at(0ms), 250ms) == at(250ms));
  CHECK(next_tick(at(1ms), 250ms) == at(250ms));
  CHECK(next_tick(at(249ms), 250ms) == at(250ms));
  CHECK(next_tick(at(250ms), 250ms) == at(500ms));  // on a tick: the next one, never now
  CHECK(next_tick(at(1'000'001ms), 50ms) == at(1'000'050ms));
  // Below a millisecond counts as the millisecond it is in.
  CHECK(next_tick(at(250ms) + 999us, 250ms) == at(500ms));
}

TEST_CASE("different periods share the ticks of their common multiples", "[unit][read_parking]") {
  // A job polling at 50 ms and readers paced at 250 ms meet on every 250 ms tick.
  const auto now = at(12'345ms);
  CHECK(next_tick(now, 250ms) == at(12'500ms));
  auto t = now;
  while (t < at(12'500ms)) t = next_tick(t, 50ms);
  CHECK(t == at(12'500ms));
}

TEST_CASE("a period of zero or less is due at once", "[unit][read_parking]") {
  CHECK(next_tick(at(777ms), 0ms) == at(777ms));
  CHECK(next_tick(at(777ms), -5ms) == at(777ms));
}
