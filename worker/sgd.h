// Stochastic gradient descent with optional momentum (Polyak 1964) or Nesterov momentum in the
// form of Sutskever, Martens, Dahl & Hinton (ICML 2013), computed exactly as Keras 3's
// keras.optimizers.SGD does, in float32. As in Keras, momentum 0 keeps no state at all.
#pragma once

#include "worker/optimizer.h"

namespace baton::worker {

class sgd final : public optimizer {
 public:
  // Use make_optimizer (which validates the spec).
  sgd(const protocol::optimizer_spec& spec, std::vector<parameter<float>> params,
      storage_fill fill = storage_fill::zeroed);

  // momentum 0:  w -= g * lr
  // otherwise:   velocity = velocity * momentum - g * lr
  //              w += velocity                                (plain)
  //              w += velocity * momentum - g * lr            (nesterov)
  void begin_update() override {}
  void update(std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) override;

  // optimizer.layers.{i}.kernel.momentum, then the bias's, in parameter order (none if momentum 0).
  std::vector<state_tensor> state() override;

 private:
  float lr_, momentum_;
  bool nesterov_;
  std::vector<storage<float>> velocity_;  // params_[k].value.size() each
};

}  // namespace baton::worker
