// Losses over a batch, reduced as Keras's default "sum_over_batch_size": the mean over samples of
// each sample's loss (BCE and MSE first average over output units, CCE sums over classes). When the
// last activation is sigmoid (BCE) or softmax (CCE), the loss takes the logits Z and applies the
// activation itself, as Keras's TensorFlow backend does: exact, stable, and dL/dZ = (p - y)/n.
#pragma once

#include <cstdint>

#include "protocol/job_spec.h"
#include "worker/activation.h"
#include "worker/tensor.h"

namespace baton::worker {

using protocol::loss_kind;

// Keras backend.epsilon(): probabilities are clipped to [eps, 1 - eps] before a log.
inline constexpr double probability_epsilon = 1e-7;

struct accuracy_count {
  std::int64_t correct = 0;
  std::int64_t total = 0;
};

template <class S>
class loss_function {
 public:
  // `last` is the model's final activation; it decides whether the loss consumes logits.
  loss_function(loss_kind kind, activation last);

  // True: the model hands the loss pre-activation outputs Z and skips the last activation.
  bool takes_logits() const { return mode_ == mode::bce_logits || mode_ == mode::cce_logits; }

  // Sum over rows of each sample's loss (callers divide by the sample count).
  double sum(const_matrix_map<S> out, const_matrix_map<S> target) const;

  // Mean loss over the batch; writes d(mean loss)/d(out) into `grad` (same shape as `out`).
  //   BCE from logits:  l = max(z,0) - z y + log(1 + e^-|z|),   dl/dz = sigmoid(z) - y
  //   BCE from probabilities (Keras): p' = clip(p, eps, 1-eps), l = -(y log p' + (1-y) log(1-p')),
  //     dl/dp = (p' - y) / (p'(1 - p')) inside the clip range, 0 outside (as clip's gradient)
  //   CCE from logits:  l = -sum_j y_j log softmax(z)_j,  dl/dz = softmax(z) sum(y) - y
  //   CCE from probabilities (Keras): q = p / sum(p), q' = clip(q), l = -sum_j y_j log q'_j
  //   MSE:  l = mean_j (p_j - y_j)^2,  dl/dp = 2 (p - y) / units
  // (Cross-entropy: Goodfellow, Bengio & Courville, Deep Learning 2016, 6.2.2.)
  double forward_backward(const_matrix_map<S> out, const_matrix_map<S> target,
                          matrix_map<S> grad) const;

  // Keras "accuracy": binary (p > 0.5 equals y, per element) for BCE and single-unit outputs,
  // argmax match per sample otherwise.
  accuracy_count accuracy(const_matrix_map<S> out, const_matrix_map<S> target) const;

 private:
  enum class mode { bce_logits, bce_probabilities, cce_logits, cce_probabilities, mse };
  mode mode_;
};

}  // namespace baton::worker
