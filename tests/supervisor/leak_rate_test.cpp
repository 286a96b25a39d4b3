#include "supervisor/leak_rate.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

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

namespace {

constexpr double mib = 1024.0 * 1024.0;

// What a trainer's curve looks like: start-up climbing from 20 to 300 MiB while the step is still
// the resume step, then `steps` steps leaking `leak` bytes each (several samples a step, a little
// allocator noise), then the checkpoint written at the last step: 80 MiB more, briefly.
std::vector<rss_sample> trainer_curve(double leak, std::int64_t start, int steps, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.2 * mib);
  std::vector<rss_sample> out;
  std::int64_t t = 0;
  for (int i = 0; i < 6; ++i) {
    out.push_back({start, t += 100, static_cast<std::uint64_t>((20 + 56 * i) * mib)});
  }
  for (int k = 1; k <= steps; ++k) {
    for (int j = 0; j < 3; ++j) {
      const double bytes = 300 * mib + leak * (k + j / 3.0) + noise(rng);
      out.push_back({start + k, t += 100, static_cast<std::uint64_t>(bytes)});
    }
  }
  const double end = 300 * mib + leak * (steps + 1) + 80 * mib;
  out.push_back({start + steps, t += 100, static_cast<std::uint64_t>(end)});
  return out;
}

}  // namespace

TEST_CASE("the steady part gives known leaks within 10 percent where a raw fit does not",
          "[unit][leak_rate]") {
  for (const double leak_mib : {0.25, 1.0, 4.0}) {
    CAPTURE(leak_mib);
    const auto curve = trainer_curve(leak_mib * mib, 1000, 20, 7);
    const auto e = estimate_leak(curve);
    REQUIRE(e);
    CHECK(std::abs(e->bytes_per_step / mib - leak_mib) <= 0.1 * leak_mib);
    CHECK(std::abs(e->bytes_per_step / mib - leak_mib) <= e->ci95_bytes_per_step / mib * 2);
    CHECK(e->workers == 1);
    CHECK(e->samples == 3 * 19);  // steps 1001..1019: the resume step and the last one left out
    // The fit over everything reads the start-up ramp as leak: off by far more than 10%.
    const auto raw = leak_bytes_per_step(curve);
    REQUIRE(raw);
    CHECK(std::abs(*raw / mib - leak_mib) > 0.1 * leak_mib);
  }
  const auto flat = estimate_leak(trainer_curve(0.0, 0, 20, 7));
  REQUIRE(flat);
  CHECK(std::abs(flat->bytes_per_step) <= flat->ci95_bytes_per_step);
  CHECK(flat->ci95_bytes_per_step < 0.05 * mib);
}

TEST_CASE("the 95 percent interval holds the true rate about 95 times in 100",
          "[unit][leak_rate]") {
  int inside = 0;
  const int runs = 400;
  // RSS = 1 MiB a step plus independent noise: the model the interval assumes. (On trainer_curve
  // the RSS also climbs within a step, which only widens the interval.)
  for (int seed = 0; seed < runs; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::normal_distribution<double> noise(0.0, 0.5 * mib);
    std::vector<rss_sample> curve;
    for (int step = 0; step < 14; ++step) {
      for (int j = 0; j < 3; ++j) {
        curve.push_back({step, 0, static_cast<std::uint64_t>(300 * mib + step * mib + noise(rng))});
      }
    }
    const auto e = estimate_leak(curve);
    REQUIRE(e);
    if (std::abs(e->bytes_per_step - mib) <= e->ci95_bytes_per_step) ++inside;
  }
  CHECK(inside >= runs * 90 / 100);
  CHECK(inside <= runs * 99 / 100);
}

TEST_CASE("too short a steady part is not enough samples, never a number", "[unit][leak_rate]") {
  // Start-up at step 5, two steps, the last one: one steady step only.
  std::vector<rss_sample> s = {{5, 0, 100}, {5, 1, 200}, {6, 2, 300},
                               {6, 3, 310}, {6, 4, 320}, {7, 5, 900}};
  const auto e = estimate_leak(s);
  REQUIRE_FALSE(e);
  CHECK(e.error().message ==
        "not enough samples (3 in the steady part, at least 6 over 3 steps needed)");
  CHECK_FALSE(estimate_leak(std::vector<rss_sample>{}));
  CHECK_FALSE(estimate_leak(std::vector<leak_sums>{}));
}

TEST_CASE("the running sums equal a fit over the steady samples", "[unit][leak_rate]") {
  const auto curve = trainer_curve(0.5 * mib, 40, 30, 3);
  std::vector<double> x, y;
  for (const auto& p : curve) {
    if (p.step == 40 || p.step == 70) continue;
    x.push_back(static_cast<double>(p.step));
    y.push_back(static_cast<double>(p.rss_bytes));
  }
  const auto direct = fit_line(x, y);
  REQUIRE(direct);
  const auto sums = steady_sums(curve);
  CHECK(sums.samples == static_cast<std::int64_t>(x.size()));
  CHECK(sums.distinct_steps == 29);
  REQUIRE(estimate_leak(curve));
  CHECK(estimate_leak(curve)->bytes_per_step == Approx(direct->slope).epsilon(1e-9));
}

TEST_CASE("pooled workers share one slope and keep their own intercepts", "[unit][leak_rate]") {
  // Each worker starts again low after its recycle: a single line through all of them would be
  // pulled down by the drops.
  std::vector<leak_sums> workers;
  std::vector<rss_sample> all;
  for (int w = 0; w < 4; ++w) {
    auto c = trainer_curve(2.0 * mib, w * 20, 20, static_cast<unsigned>(w));
    workers.push_back(steady_sums(c));
    all.insert(all.end(), c.begin(), c.end());
  }
  const auto pooled = estimate_leak(workers);
  REQUIRE(pooled);
  CHECK(pooled->workers == 4);
  CHECK(pooled->bytes_per_step / mib == Approx(2.0).epsilon(0.02));
  // Workers too short to say anything alone still add their steady samples to the pool.
  std::vector<leak_sums> shorts;
  for (int w = 0; w < 3; ++w) shorts.push_back(steady_sums(trainer_curve(2.0 * mib, w * 4, 3, w)));
  for (const auto& s : shorts) CHECK_FALSE(estimate_leak(std::vector<leak_sums>{s}));
  const auto together = estimate_leak(shorts);
  REQUIRE(together);
  CHECK(together->bytes_per_step / mib == Approx(2.0).epsilon(0.1));
}
