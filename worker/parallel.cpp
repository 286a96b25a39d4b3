#include "worker/parallel.h"

#include <Eigen/Core>
#include <thread>

#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#define BATON_HAVE_MXCSR 1
#endif

namespace baton::worker {

namespace {

void flush_denormals_on_this_thread() {
#ifdef BATON_HAVE_MXCSR
  // FTZ (bit 15) and DAZ (bit 6).
  _mm_setcsr(_mm_getcsr() | 0x8040u);
#endif
}

// About 20-50 microseconds of polling before sleeping.
constexpr int spin_iterations = 1 << 12;

inline void cpu_relax() {
#ifdef BATON_HAVE_MXCSR
  _mm_pause();
#endif
}

}  // namespace

int set_thread_count(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  // A team whose size varies with load would change the static partitions between steps.
  omp_set_dynamic(0);
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
  // Threads created later inherit the creator's MXCSR; threads already in the pool are set here.
  flush_denormals_on_this_thread();
#pragma omp parallel
  flush_denormals_on_this_thread();
  return threads;
}

int thread_count() { return omp_get_max_threads(); }

void run_side_by_side(const std::function<void()>& a, const std::function<void()>& b) {
  if (omp_get_max_threads() < 2 || omp_in_parallel()) {
    a();
    b();
    return;
  }
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() < 2) {  // the runtime gave fewer threads than asked
      a();
      b();
    } else if (omp_get_thread_num() == 0) {
      a();
    } else {
      b();
    }
  }
}

void team_barrier::arrive_and_wait() {
  const unsigned gen = generation_.load(std::memory_order_acquire);
  // acq_rel: the last arriver acquires every other thread's writes (release sequence on
  // arrived_) and publishes them with the generation bump.
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      size_.load(std::memory_order_relaxed)) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    return;
  }
  for (int i = 0; i < spin_iterations; ++i) {
    if (generation_.load(std::memory_order_acquire) != gen) return;
    cpu_relax();
  }
#if defined(__GLIBCXX__) && !defined(_GLIBCXX_HAVE_PLATFORM_WAIT)
  // libstdc++ 12 without a futex (mingw-w64) emulates atomic::wait with a condition variable
  // and loses wake-ups: under wine both team threads sat in wait() forever (a 5000-row epoch hung
  // every time). Yielding still leaves the time slice to the late thread, which is what sleeping
  // is for here.
  while (generation_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
#else
  while (generation_.load(std::memory_order_acquire) == gen) {
    generation_.wait(gen, std::memory_order_acquire);
  }
#endif
}

void team::barrier() const {
  if (size <= 1) return;
  if (sync) {
    sync->arrive_and_wait();
  } else {
#pragma omp barrier
  }
}

}  // namespace baton::worker
