// worker/dataset_synthetic.cpp: the seeded generator and the synthetic source of load_dataset.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "support/dataset_fixtures.h"
#include "support/thread_count_guard.h"
#include "worker/dataset.h"
#include "worker/parallel.h"
#include "worker/random.h"

using namespace baton::worker::testing;
using baton::protocol::synthetic_data;
using baton::worker::row_matrix;

TEST_CASE("synthetic data is deterministic per seed and differs across seeds", "[unit][dataset]") {
  map_env e;
  const synthetic_data spec{200, 30, 11};
  auto a = load_dataset(e, spec, loss_kind::binary_crossentropy, 1);
  auto b = load_dataset(e, spec, loss_kind::binary_crossentropy, 1);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->x.rows() == 200);
  REQUIRE(a->x.cols() == 30);
  REQUIRE(a->y.rows() == 200);
  REQUIRE(a->y.cols() == 1);
  CHECK(std::memcmp(a->x.data(), b->x.data(), sizeof(float) * 200 * 30) == 0);
  CHECK(a->y == b->y);
  auto c = load_dataset(e, synthetic_data{200, 30, 12}, loss_kind::binary_crossentropy, 1);
  REQUIRE(c);
  CHECK((a->x.array() != c->x.array()).count() > 200 * 30 - 5);
}

TEST_CASE("synthetic data has the reference workload's statistics", "[unit][dataset]") {
  auto d = baton::worker::generate_synthetic(synthetic_data{5000, 100, 0});
  REQUIRE(d);
  const double n = 5000.0 * 100.0;
  const double mean = d->x.cast<double>().sum() / n;
  const double var = (d->x.cast<double>().array() - mean).square().sum() / n;
  // Standard errors: mean 1/sqrt(n) = 0.0014, std about 0.001, label share 0.007.
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(std::sqrt(var) - 1.0) < 0.01);
  // Tails of a real normal: about 0.27% beyond 3 sigma.
  const double beyond3 = static_cast<double>((d->x.array().abs() > 3.0f).count()) / n;
  CHECK(beyond3 > 0.002);
  CHECK(beyond3 < 0.0035);
  const double positive = d->y.cast<double>().sum() / 5000.0;
  CHECK(std::abs(positive - 0.5) < 0.03);
  for (Eigen::Index r = 0; r < 5000; ++r) {
    const double sum = d->x.row(r).cast<double>().sum();
    REQUIRE(d->y(r, 0) == (sum > 0 ? 1.0f : 0.0f));
  }
}

TEST_CASE("synthetic generator matches golden values on every platform", "[unit][dataset]") {
  // Verified against an independent Python implementation (splitmix64 -> xoshiro256**, polar
  // method with math.log); the generator's own golden values are in random_test.cpp.
  auto d = baton::worker::generate_synthetic(synthetic_data{5000, 100, 7});
  REQUIRE(d);
  CHECK(d->x(0, 0) == 0x1.edc0d6p-1f);
  CHECK(d->x(0, 1) == -0x1.105222p+0f);
  CHECK(d->x(4999, 99) == 0x1.a682fp+0f);
}

TEST_CASE("synthetic data is normal()'s stream in row order at any width and thread count",
          "[unit][dataset]") {
  // Odd widths put a pair's two values in two blocks of rows (the spare carried between them);
  // 20000 x 7 and 3000 x 101 span several blocks, and both take the parallel path at 2 threads.
  const thread_count_guard restore;
  for (int threads : {1, 2}) {
    baton::worker::set_thread_count(threads);
    for (const auto& [rows, cols] : {std::pair{20000, 7}, std::pair{3000, 101}, std::pair{5, 1}}) {
      CAPTURE(threads, rows, cols);
      auto d = baton::worker::generate_synthetic(synthetic_data{rows, cols, 9});
      REQUIRE(d);
      baton::worker::rng gen(9);
      std::int64_t differ = 0, wrong_labels = 0;
      for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int c = 0; c < cols; ++c) {
          const float v = static_cast<float>(gen.normal());
          differ += std::memcmp(&v, &d->x(r, c), sizeof v) != 0 ? 1 : 0;
          sum += static_cast<double>(v);
        }
        wrong_labels += d->y(r, 0) != (sum > 0 ? 1.0f : 0.0f) ? 1 : 0;
      }
      CHECK(differ == 0);
      CHECK(wrong_labels == 0);
    }
  }
}

TEST_CASE("synthetic labels become one-hot for categorical losses", "[unit][dataset]") {
  map_env e;
  auto d = load_dataset(e, synthetic_data{50, 4, 1}, loss_kind::categorical_crossentropy, 2);
  auto plain = baton::worker::generate_synthetic(synthetic_data{50, 4, 1});
  REQUIRE(d);
  REQUIRE(plain);
  REQUIRE(d->y.cols() == 2);
  for (Eigen::Index r = 0; r < 50; ++r) {
    CHECK(d->y(r, 1) == plain->y(r, 0));
    CHECK(d->y(r, 0) == 1.0f - plain->y(r, 0));
  }
}

TEST_CASE("synthetic data needs positive sizes", "[unit][dataset]") {
  map_env e;
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{0, 4, 1}, loss_kind::mse, 1)),
             Catch::Contains("samples and features must be positive, got 0 x 4"));
}
