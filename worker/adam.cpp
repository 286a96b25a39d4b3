#include "worker/adam.h"

#include <cmath>

namespace baton::worker {

// Keras casts each hyperparameter to the variable dtype; (1 - beta) is formed in double first
// (a Python float) and then rounded, as Keras's ops do with a Python scalar.
adam::adam(const protocol::optimizer_spec& spec, std::vector<parameter<float>> params,
           storage_fill fill)
    : optimizer(std::move(params)),
      lr_(static_cast<float>(spec.learning_rate)),
      beta_1_(static_cast<float>(spec.beta_1)),
      beta_2_(static_cast<float>(spec.beta_2)),
      one_minus_beta_1_(static_cast<float>(1.0 - spec.beta_1)),
      one_minus_beta_2_(static_cast<float>(1.0 - spec.beta_2)),
      epsilon_(static_cast<float>(spec.epsilon)) {
  for (const auto& p : params_) {
    m_.push_back(make_storage<float>(p.value.size(), fill));
    v_.push_back(make_storage<float>(p.value.size(), fill));
  }
}

void adam::begin_update() {
  const float t = static_cast<float>(iterations_ + 1);
  alpha_ = lr_ * std::sqrt(1.0f - std::pow(beta_2_, t)) / (1.0f - std::pow(beta_1_, t));
}

void adam::update(std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) {
  const float alpha = alpha_;
  const float b1 = one_minus_beta_1_;
  const float b2 = one_minus_beta_2_;
  const float eps = epsilon_;
  const std::int64_t n = end - begin;
  float* __restrict w = params_[k].value.data() + begin;
  const float* __restrict g = grad;
  float* __restrict m = m_[k].get() + begin;
  float* __restrict v = v_[k].get() + begin;
  // Plain IEEE operations in the formula's order (no contraction, exact sqrt and division), so
  // vector lanes and the scalar remainder round the same. `omp simd` because GCC 12 does not
  // vectorise this loop by itself (it compiled to vsqrtss/vdivss: 4x the memory-bound floor).
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] + (gi - m[i]) * b1;
    const float vi = v[i] + (gi * gi - v[i]) * b2;
    m[i] = mi;
    v[i] = vi;
    w[i] -= (mi * alpha) / (std::sqrt(vi) + eps);
  }
}

std::vector<state_tensor> adam::state() {
  std::vector<state_tensor> s;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const std::string prefix = "optimizer." + params_[k].name;
    const std::size_t n = params_[k].value.size();
    s.push_back({prefix + ".m", params_[k].shape, {m_[k].get(), n}});
    s.push_back({prefix + ".v", params_[k].shape, {v_[k].get(), n}});
  }
  return s;
}

}  // namespace baton::worker
