// Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, arXiv:1412.6980),
// computed exactly as Keras 3's keras.optimizers.Adam does, in float32. Keras folds the bias
// corrections into the step size and adds epsilon to sqrt(v) rather than to sqrt(v_hat) (the
// paper's "epsilon hat" form, section 2); the two differ only in where epsilon sits.
#pragma once

#include "worker/optimizer.h"

namespace baton::worker {

class adam final : public optimizer {
 public:
  // Use make_optimizer (which validates the spec).
  adam(const protocol::optimizer_spec& spec, std::vector<parameter<float>> params,
       storage_fill fill = storage_fill::zeroed);

  // With t = iterations + 1, all in float32 and in this operation order:
  //   alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
  //   m += (g - m) * (1 - beta_1)
  //   v += (g*g - v) * (1 - beta_2)
  //   w -= (m * alpha) / (sqrt(v) + epsilon)
  // One pass over w, g, m, v per element.
  void begin_update() override;
  void update(std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) override;

  // optimizer.layers.{i}.kernel.m, .v, then the same for the bias, in parameter order.
  std::vector<state_tensor> state() override;

 private:
  float alpha_ = 0;  // of the step in progress
  float lr_, beta_1_, beta_2_, one_minus_beta_1_, one_minus_beta_2_, epsilon_;
  std::vector<storage<float>> m_, v_;  // params_[k].value.size() each
};

}  // namespace baton::worker
