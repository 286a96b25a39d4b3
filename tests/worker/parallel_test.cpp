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
