// Helpers shared by the worker's math tests: central-difference derivatives computed in double
// (the gradient checks of tiny-dnn), closeness with a relative tolerance, and seeded matrices.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "protocol/job_spec.h"
#include "worker/random.h"
#include "worker/tensor.h"

namespace baton::worker::testing {

// d loss / d x by central differences: (L(x + h) - L(x - h)) / 2h, error O(h^2).
template <class F>
double central_difference(F&& loss, double& x, double h = 1e-5) {
  const double x0 = x;
  x = x0 + h;
  const double up = loss();
  x = x0 - h;
  const double down = loss();
  x = x0;
  return (up - down) / (2 * h);
}

inline bool close(double a, double b, double rel, double abs = 0.0) {
  return std::abs(a - b) <= std::max(abs, rel * std::max(std::abs(a), std::abs(b)));
}

template <class S>
row_matrix<S> normal_matrix(idx rows, idx cols, std::uint64_t seed, double scale = 1.0) {
  rng r(seed);
  row_matrix<S> m(rows, cols);
  for (idx i = 0; i < rows; ++i) {
    for (idx j = 0; j < cols; ++j) m(i, j) = static_cast<S>(scale * r.normal());
  }
  return m;
}

template <class S>
const_matrix_map<S> cview(const row_matrix<S>& m) {
  return {m.data(), m.rows(), m.cols()};
}
template <class S>
matrix_map<S> view(row_matrix<S>& m) {
  return {m.data(), m.rows(), m.cols()};
}

}  // namespace baton::worker::testing

// Tests spell job-spec types as protocol::... from the global namespace.
namespace protocol = baton::protocol;
