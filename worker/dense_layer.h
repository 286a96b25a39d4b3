// One fully connected layer, Y = act(X W + b), with the kernel laid out [inputs x units] as Keras
// stores it. The layer owns its parameters, their gradients and max-batch-sized output and
// output-gradient buffers; every pass works on maps over the first `rows` rows of those buffers,
// so no pass allocates (short final batches included). The model owns the order of calls.
#pragma once

#include "worker/activation.h"
#include "worker/tensor.h"

namespace baton::worker {

template <class S>
class dense_layer {
 public:
  dense_layer(idx inputs, idx units, activation act, idx max_batch);

  idx inputs() const { return kernel_.rows(); }
  idx units() const { return kernel_.cols(); }
  idx max_batch() const { return out_.rows(); }
  activation act() const { return act_; }

  // Z = X W + b with the activation fused into the bias pass (Rumelhart, Hinton & Williams 1986).
  // With `apply_activation` false the output stays Z: the loss consumes logits. x.rows() must be
  // at most max_batch().
  const_matrix_map<S> forward(const_matrix_map<S> x, bool apply_activation = true);

  // Applies the activation to an output left as logits by forward(x, false) (for predictions).
  void activate_output();

  // The output of the last forward, and the buffer where the caller (the loss, or the next
  // layer's backward) writes dL/d(output) for the same rows.
  const_matrix_map<S> output() const { return {out_.data(), rows_, units()}; }
  matrix_map<S> output_grad() { return {out_grad_.data(), rows_, units()}; }
  S* output_grad_data() { return out_grad_.data(); }

  // From output_grad() (dL/dY, or dL/dZ when `grad_is_preactivation`), turned into dL/dZ in place:
  //   dW = X^T dZ,  db = column sums of dZ,  and when `dx` is not null dX = dZ W^T written to dx
  //   (x.rows() x inputs(), row-major). `x` is the same input the forward pass saw.
  void backward(const_matrix_map<S> x, bool grad_is_preactivation, S* dx);

  row_matrix<S>& kernel() { return kernel_; }
  row_vector<S>& bias() { return bias_; }
  const row_matrix<S>& kernel() const { return kernel_; }
  const row_vector<S>& bias() const { return bias_; }
  row_matrix<S>& kernel_grad() { return kernel_grad_; }
  row_vector<S>& bias_grad() { return bias_grad_; }

 private:
  activation act_;
  idx rows_ = 0;  // rows of the last forward pass
  row_matrix<S> kernel_;
  row_vector<S> bias_;
  row_matrix<S> kernel_grad_;
  row_vector<S> bias_grad_;
  row_matrix<S> out_;       // max_batch x units
  row_matrix<S> out_grad_;  // max_batch x units
};

}  // namespace baton::worker
