// Fixed static work partitions over the OpenMP team. Every parallel loop in the worker splits its
// range the same way for a given thread count and no value is ever reduced across threads, so
// results are bit-for-bit reproducible for a given binary, machine and thread count.
// set_thread_count is the one place that decides how many threads Eigen and OpenMP use.
#pragma once

#include <omp.h>

#include <cstdint>

namespace baton::worker {

// Sets the threads used by Eigen's GEMM and by the worker's own loops; 0 means one per core.
// Returns the count in effect. Call before building a model, not while a step runs.
int set_thread_count(int threads);
int thread_count();

// Below this much work (roughly flops) waking the team costs more than it saves.
inline constexpr std::int64_t min_parallel_work = std::int64_t{1} << 15;

// Part `part` of `parts` of [0, n): contiguous, sizes differ by at most one.
struct index_range {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
inline index_range static_part(std::int64_t n, int part, int parts) {
  return {n * part / parts, n * (part + 1) / parts};
}

// Calls f(begin, end) on the static parts of [0, n), one per thread. Runs f(0, n) on the calling
// thread when the work (n * cost_per_item) is small or when already inside a parallel region.
template <class F>
void parallel_for(std::int64_t n, std::int64_t cost_per_item, F&& f) {
  if (n <= 0) return;
  if (n * cost_per_item < min_parallel_work || omp_get_max_threads() < 2 || omp_in_parallel()) {
    f(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const index_range r = static_part(n, omp_get_thread_num(), omp_get_num_threads());
    if (r.begin < r.end) f(r.begin, r.end);
  }
}

}  // namespace baton::worker
