#include "worker/parallel.h"

#include <Eigen/Core>

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

void team::barrier() const {
  if (size > 1) {
#pragma omp barrier
  }
}

}  // namespace baton::worker
