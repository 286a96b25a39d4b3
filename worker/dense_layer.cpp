#include "worker/dense_layer.h"

#include "worker/parallel.h"

namespace baton::worker {

template <class S>
dense_layer<S>::dense_layer(idx inputs, idx units, activation act, idx max_batch)
    : act_(act),
      kernel_(row_matrix<S>::Zero(inputs, units)),
      bias_(row_vector<S>::Zero(units)),
      kernel_grad_(row_matrix<S>::Zero(inputs, units)),
      bias_grad_(row_vector<S>::Zero(units)),
      out_(row_matrix<S>::Zero(max_batch, units)),
      out_grad_(row_matrix<S>::Zero(max_batch, units)) {}

template <class S>
const_matrix_map<S> dense_layer<S>::forward(const_matrix_map<S> x, bool apply_activation) {
  rows_ = x.rows();
  matrix_map<S> z(out_.data(), rows_, units());
  // Eigen's GEMM splits the output over the team by a fixed rule: deterministic per thread count.
  z.noalias() = x * kernel_;
  bias_activation_forward<S>(apply_activation ? act_ : activation::linear, z, bias_.data());
  return output();
}

template <class S>
void dense_layer<S>::backward(const_matrix_map<S> x, bool grad_is_preactivation, S* dx) {
  matrix_map<S> dz(out_grad_.data(), rows_, units());
  if (!grad_is_preactivation) activation_backward<S>(act_, output(), dz);
  kernel_grad_.noalias() = x.transpose() * dz;
  // Column sums in a fixed row order; each thread owns whole columns, so no cross-thread sums.
  const idx cols = units();
  const idx rows = rows_;
  if (rows == 0) bias_grad_.setZero();
  parallel_for(cols, rows, [&](std::int64_t c0, std::int64_t c1) {
    auto db = bias_grad_.segment(c0, c1 - c0);
    db = dz.row(0).segment(c0, c1 - c0);
    for (idx r = 1; r < rows; ++r) db += dz.row(r).segment(c0, c1 - c0);
  });
  if (dx) matrix_map<S>(dx, rows_, inputs()).noalias() = dz * kernel_.transpose();
}

template <class S>
void dense_layer<S>::activate_output() {
  bias_activation_forward<S>(act_, matrix_map<S>(out_.data(), rows_, units()), nullptr);
}

template class dense_layer<float>;
template class dense_layer<double>;

}  // namespace baton::worker
