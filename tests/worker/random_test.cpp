#include "worker/random.h"

#include <catch2/catch.hpp>
#include <cmath>

using baton::worker::rng;
using baton::worker::splitmix64;

TEST_CASE("splitmix64 matches the published reference output", "[unit]") {
  // First outputs of Vigna's splitmix64.c for state 0.
  std::uint64_t state = 0;
  CHECK(splitmix64(state) == 0xe220a8397b1dcdafULL);
  CHECK(splitmix64(state) == 0x6e789e6aa1b965f4ULL);
}

TEST_CASE("rng is a pure function of its seed", "[unit]") {
  rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next();
    CHECK(x == b.next());
    differs = differs || x != c.next();
  }
  CHECK(differs);
}

TEST_CASE("uniform stays in range and is flat", "[unit]") {
  rng r(7);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform(-2.0, 3.0);
    REQUIRE(u >= -2.0);
    REQUIRE(u < 3.0);
    sum += u;
  }
  CHECK(std::abs(sum / n - 0.5) < 0.02);
}

TEST_CASE("normal has mean 0 and variance 1", "[unit]") {
  rng r(9);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    REQUIRE(std::isfinite(x));
    sum += x;
    sum2 += x * x;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum2 / n - 1.0) < 0.02);
}
