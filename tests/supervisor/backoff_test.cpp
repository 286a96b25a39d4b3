#include "supervisor/backoff.h"

#include <catch2/catch.hpp>

using baton::supervisor::backoff_delay_ms;
using baton::supervisor::backoff_policy;

TEST_CASE("backoff doubles from the initial delay up to the cap", "[unit][backoff]") {
  const backoff_policy p{1000, 2.0, 60000, 1000};
  const std::vector<std::int64_t> want = {1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000};
  for (int i = 0; i < static_cast<int>(want.size()); ++i) {
    INFO("attempt " << i);
    CHECK(backoff_delay_ms(p, i) == want[i]);
  }
}

TEST_CASE("backoff saturates for huge attempt numbers", "[unit][backoff]") {
  const backoff_policy p{1000, 10.0, 3'600'000, 1000};
  CHECK(backoff_delay_ms(p, 1'000'000) == 3'600'000);
  CHECK(backoff_delay_ms(p, 2) == 100'000);
}

TEST_CASE("backoff never goes under the one-second floor", "[unit][backoff]") {
  const backoff_policy p{100, 1.5, 60000, 1000};
  CHECK(backoff_delay_ms(p, 0) == 1000);
  CHECK(backoff_delay_ms(p, 5) == 1000);  // 100 * 1.5^5 = 759
  CHECK(backoff_delay_ms(p, 6) == 1139);  // 1139.06
  const backoff_policy tiny_cap{100, 2.0, 10, 1000};
  CHECK(backoff_delay_ms(tiny_cap, 3) == 1000);  // a cap under the floor yields the floor
}

TEST_CASE("a multiplier below 1 does not shrink the delay", "[unit][backoff]") {
  const backoff_policy p{5000, 0.5, 60000, 1000};
  CHECK(backoff_delay_ms(p, 4) == 5000);
}

TEST_CASE("backoff_from takes the job's restart settings", "[unit][backoff]") {
  baton::protocol::restart_spec r;
  r.backoff_initial_ms = 2500;
  r.backoff_multiplier = 3.0;
  r.backoff_max_ms = 20000;
  const auto p = baton::supervisor::backoff_from(r);
  CHECK(backoff_delay_ms(p, 0) == 2500);
  CHECK(backoff_delay_ms(p, 1) == 7500);
  CHECK(backoff_delay_ms(p, 2) == 20000);
}
