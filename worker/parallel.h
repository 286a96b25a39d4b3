// Fixed static work partitions over the OpenMP team. Every parallel loop in the worker splits its
// range the same way for a given thread count and no value is ever reduced across threads, so
// results are bit-for-bit reproducible for a given binary, machine and thread count.
// set_thread_count is the one place that decides how many threads Eigen and OpenMP use.
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <functional>

namespace baton::worker {

// Sets the threads used by Eigen and by the worker's own loops; 0 means one per core. Returns the
// count in effect. Call before building a model, not while a step runs.
// Also sets flush-to-zero and denormals-are-zero (x86 MXCSR) on the calling thread and on every
// thread of the team: a denormal operand costs ~100 cycles on many CPUs, and Adam's second moment
// decays geometrically towards them. Only results that would be denormal (|x| < 1.2e-38 in
// float) change, to zero; normal numbers round exactly as before.
int set_thread_count(int threads);
int thread_count();

// Runs `a` on the calling thread and `b` on a second thread of the team, at the same time, and
// returns when both have; one after the other where the team has a single thread (a job that
// asked for one thread gets no second one here). For the work between steps that splits in two
// uneven halves: a save's writes and its hash, a restore's reads and its hash. The second thread
// is the team's own, which has just finished a step and is still spinning for the next one, so
// it starts at once. Neither may throw (nothing may escape a parallel region).
void run_side_by_side(const std::function<void()>& a, const std::function<void()>& b);

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

// The rendezvous of a step's team: spins briefly, then sleeps (std::atomic::wait, a futex on
// Linux) until the last thread arrives. libgomp's own barrier spins for ~300k iterations first,
// which on a loaded 2-core machine burns the very time slice the late thread needs: measured at
// load ~6, a 2-thread epoch took 3.5 s with it and 1.2 s with sleeping waits. The spin covers the
// usual few-microsecond skew of an idle machine. Synchronisation only: no value passes through it.
class team_barrier {
 public:
  // Every thread calls join(team size) before its first wait (all store the same number).
  void join(int size) { size_.store(size, std::memory_order_relaxed); }
  void arrive_and_wait();

 private:
  std::atomic<int> size_{1};
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
};

// One thread's place in the team that runs a whole training step inside a single parallel
// region: phases split their work with part() and wait for each other with barrier().
struct team {
  int id = 0;
  int size = 1;
  team_barrier* sync = nullptr;  // null: OpenMP's barrier
  void barrier() const;
  index_range part(std::int64_t n) const { return static_part(n, id, size); }
  // A part of [0, n) whose bounds are multiples of `grain` (the last part takes the remainder),
  // so SIMD-width column blocks never straddle two threads.
  index_range part(std::int64_t n, std::int64_t grain) const {
    const index_range u = static_part(n / grain, id, size);
    return {u.begin * grain, id + 1 == size ? n : u.end * grain};
  }
};

// Runs f(team) on every thread of one parallel region; on the caller's team when already inside
// one, and on the calling thread alone when `work` (roughly flops) is too small to share.
template <class F>
void run_team(std::int64_t work, F&& f) {
  if (omp_in_parallel()) {
    f(team{omp_get_thread_num(), omp_get_num_threads()});
    return;
  }
  if (work < min_parallel_work || omp_get_max_threads() < 2) {
    f(team{});
    return;
  }
  team_barrier sync;
#pragma omp parallel
  {
    sync.join(omp_get_num_threads());
    f(team{omp_get_thread_num(), omp_get_num_threads(), &sync});
  }
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
