#include "worker/parallel.h"

#include <Eigen/Core>

namespace baton::worker {

int set_thread_count(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  // A team whose size varies with load would change Eigen's GEMM partition between steps.
  omp_set_dynamic(0);
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
  return threads;
}

int thread_count() { return omp_get_max_threads(); }

}  // namespace baton::worker
