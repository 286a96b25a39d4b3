#include "worker/sgd.h"

namespace baton::worker {

sgd::sgd(const protocol::optimizer_spec& spec, std::vector<parameter<float>> params,
         storage_fill fill)
    : optimizer(std::move(params)),
      lr_(static_cast<float>(spec.learning_rate)),
      momentum_(static_cast<float>(spec.momentum)),
      nesterov_(spec.nesterov) {
  if (spec.momentum != 0.0) {
    for (const auto& p : params_) velocity_.push_back(make_storage<float>(p.value.size(), fill));
  }
}

void sgd::update(std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) {
  const float lr = lr_;
  const float mu = momentum_;
  const std::int64_t n = end - begin;
  float* __restrict w = params_[k].value.data() + begin;
  const float* __restrict g = grad;
  if (velocity_.empty()) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) w[i] -= g[i] * lr;
    return;
  }
  float* __restrict u = velocity_[k].get() + begin;
  if (nesterov_) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) {
      const float ui = u[i] * mu - g[i] * lr;
      u[i] = ui;
      w[i] += ui * mu - g[i] * lr;
    }
  } else {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) {
      const float ui = u[i] * mu - g[i] * lr;
      u[i] = ui;
      w[i] += ui;
    }
  }
}

std::vector<state_tensor> sgd::state() {
  std::vector<state_tensor> s;
  for (std::size_t k = 0; k < velocity_.size(); ++k) {
    s.push_back({"optimizer." + params_[k].name + ".momentum",
                 params_[k].shape,
                 {velocity_[k].get(), params_[k].value.size()}});
  }
  return s;
}

}  // namespace baton::worker
