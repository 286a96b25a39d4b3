#include "worker/parallel.h"

#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <vector>

using namespace baton::worker;

TEST_CASE("static parts tile the range in order", "[unit]") {
  for (std::int64_t n : {0, 1, 7, 100, 1001}) {
    for (int parts : {1, 2, 3, 8}) {
      std::int64_t next = 0;
      for (int p = 0; p < parts; ++p) {
        const auto r = static_part(n, p, parts);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        CHECK(r.end - r.begin <= n / parts + 1);
        next = r.end;
      }
      CHECK(next == n);
    }
  }
}

TEST_CASE("set_thread_count sets OpenMP and Eigen together", "[unit]") {
  const int before = thread_count();
  CHECK(set_thread_count(2) == 2);
  CHECK(thread_count() == 2);
  CHECK(Eigen::nbThreads() == 2);
  CHECK(set_thread_count(0) == omp_get_num_procs());
  set_thread_count(before);
}

TEST_CASE("parallel_for visits every index exactly once", "[unit]") {
  const int before = thread_count();
  set_thread_count(2);
  for (std::int64_t n : {1, 5, 100000}) {
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    parallel_for(n, min_parallel_work, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
    });
    for (int s : seen) REQUIRE(s == 1);
  }
  set_thread_count(before);
}

TEST_CASE("team parts in SIMD grains tile the range", "[unit]") {
  for (std::int64_t n : {0, 1, 15, 16, 17, 2000}) {
    for (int size : {1, 2, 3}) {
      std::int64_t next = 0;
      for (int id = 0; id < size; ++id) {
        const auto r = team{id, size}.part(n, 16);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        if (id + 1 < size) CHECK(r.end % 16 == 0);
        next = r.end;
      }
      CHECK(next == n);
    }
  }
}

#if defined(__SSE__)
TEST_CASE("set_thread_count flushes denormals on every team thread", "[unit]") {
  const int before = thread_count();
  set_thread_count(2);
  // 1e-20^2 = 1e-40 is denormal in float: flushed to 0 it stays 0 after * 1e10, else 1e-30.
  volatile float tiny = 1e-20f;  // volatile: computed at run time, under MXCSR
  std::vector<float> got(2, -1.0f);
#pragma omp parallel num_threads(2)
  got[static_cast<std::size_t>(omp_get_thread_num())] = tiny * tiny * 1e10f;
  CHECK(got[0] == 0.0f);
  CHECK(got[1] == 0.0f);
  set_thread_count(before);
}
#endif
