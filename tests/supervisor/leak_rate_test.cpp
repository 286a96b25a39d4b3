#include "supervisor/leak_rate.h"

#include <catch2/catch.hpp>

using namespace baton::supervisor;

TEST_CASE("fit_line recovers an exact line", "[unit][leak_rate]") {
  auto f = fit_line({0, 1, 2, 3}, {5, 7, 9, 11});
  REQUIRE(f);
  CHECK(f->slope == Approx(2.0));
  CHECK(f->intercept == Approx(5.0));
}

TEST_CASE("fit_line is the least-squares slope of noisy data", "[unit][leak_rate]") {
  // x = 1..5, y = 2, 4, 5, 4, 5: slope = Sxy/Sxx = 6/10, intercept = 4 - 0.6 * 3.
  auto f = fit_line({1, 2, 3, 4, 5}, {2, 4, 5, 4, 5});
  REQUIRE(f);
  CHECK(f->slope == Approx(0.6));
  CHECK(f->intercept == Approx(2.2));
}

TEST_CASE("fit_line gives no estimate without two distinct x", "[unit][leak_rate]") {
  CHECK_FALSE(fit_line({}, {}));
  CHECK_FALSE(fit_line({1}, {1}));
  CHECK_FALSE(fit_line({3, 3, 3}, {1, 2, 3}));
  CHECK_FALSE(fit_line({1, 2}, {1}));
}

TEST_CASE("leak per step and per second from RSS samples", "[unit][leak_rate]") {
  // 1 MiB per step, 100 steps per second, sampled with an epoch-sized clock offset.
  std::vector<rss_sample> s;
  const std::int64_t t0 = 1'700'000'000'000;
  for (int i = 0; i < 50; ++i) {
    s.push_back({3000 + i * 10, t0 + i * 100, 500ull * 1024 * 1024 + i * 10ull * 1024 * 1024});
  }
  auto per_step = leak_bytes_per_step(s);
  REQUIRE(per_step);
  CHECK(*per_step == Approx(1024.0 * 1024.0));
  auto per_sec = leak_bytes_per_second(s);
  REQUIRE(per_sec);
  CHECK(*per_sec == Approx(100.0 * 1024 * 1024));
}

TEST_CASE("flat or shrinking memory gives zero or negative rates", "[unit][leak_rate]") {
  std::vector<rss_sample> flat = {{0, 0, 100}, {10, 1000, 100}, {20, 2000, 100}};
  CHECK(*leak_bytes_per_step(flat) == Approx(0.0));
  std::vector<rss_sample> down = {{0, 0, 300}, {10, 1000, 200}, {20, 2000, 100}};
  CHECK(*leak_bytes_per_step(down) == Approx(-10.0));
  CHECK(*leak_bytes_per_second(down) == Approx(-100.0));
}

TEST_CASE("samples all at one step give no per-step rate but a per-second one",
          "[unit][leak_rate]") {
  std::vector<rss_sample> s = {{7, 0, 100}, {7, 500, 150}, {7, 1000, 200}};
  CHECK_FALSE(leak_bytes_per_step(s));
  REQUIRE(leak_bytes_per_second(s));
  CHECK(*leak_bytes_per_second(s) == Approx(100.0));
  CHECK_FALSE(leak_bytes_per_second({{1, 1, 1}}));
}
