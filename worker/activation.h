// Activations applied in place to a batch of pre-activations Z (one sample per row), fused with
// the bias add, and their backward passes, which turn dL/dY into dL/dZ in place from Y alone:
// every activation here has a derivative expressible through its output. Templated on the scalar
// so gradient checks run in double; instantiated for float and double.
#pragma once

#include <string_view>

#include "protocol/job_spec.h"
#include "worker/tensor.h"

namespace baton::worker {

using protocol::activation;

// Z <- act(Z + bias) in one pass; `bias` (length cols) may be null. Row-parallel.
//   relu(z) = max(z, 0)                          (Nair & Hinton, ICML 2010)
//   sigmoid(z) = 1 / (1 + e^-z), tanh(z)
//   softmax(z)_j = e^(z_j - max z) / sum_k e^(z_k - max z), per row (Bridle 1990); subtracting the
//   row max changes nothing mathematically and keeps exp from overflowing.
template <class S>
void bias_activation_forward(activation a, matrix_map<S> z, const S* bias);

// The same for an elementwise activation (not softmax) on a block of `rows` x `cols` elements
// whose rows start `ld` apart: one thread's columns of a batch.
template <class S>
void bias_activation_block(activation a, S* z, idx rows, idx cols, idx ld, const S* bias);

template <class S>
void activation_forward(activation a, matrix_map<S> z) {
  bias_activation_forward<S>(a, z, nullptr);
}

// grad <- dL/dZ given grad = dL/dY and Y = act(Z):
//   relu: dY * [Y > 0]   sigmoid: dY * Y(1 - Y)   tanh: dY * (1 - Y^2)   linear: dY
//   softmax (per row): Y * (dY - <dY, Y>)   (the Jacobian diag(Y) - Y Y^T applied to dY)
template <class S>
void activation_backward(activation a, const_matrix_map<S> y, matrix_map<S> grad);

std::string_view activation_name(activation a);

}  // namespace baton::worker
