#include "worker/sgd.h"

#include "worker/optimizer_impl.h"

namespace baton::worker {

sgd::sgd(const protocol::optimizer_spec& spec, std::vector<parameter<float>> params)
    : optimizer(std::move(params)),
      lr_(static_cast<float>(spec.learning_rate)),
      momentum_(static_cast<float>(spec.momentum)),
      nesterov_(spec.nesterov) {
  if (spec.momentum != 0.0) {
    for (const auto& p : params_) velocity_.emplace_back(p.value.size(), 0.0f);
  }
}

void sgd::step() {
  const float lr = lr_;
  const float mu = momentum_;
  if (velocity_.empty()) {
    for_each_part(2, [&](std::size_t k, std::int64_t lo, std::int64_t hi) {
      float* __restrict w = params_[k].value.data();
      const float* __restrict g = params_[k].grad.data();
      for (std::int64_t i = lo; i < hi; ++i) w[i] -= g[i] * lr;
    });
  } else if (nesterov_) {
    for_each_part(6, [&](std::size_t k, std::int64_t lo, std::int64_t hi) {
      float* __restrict w = params_[k].value.data();
      const float* __restrict g = params_[k].grad.data();
      float* __restrict u = velocity_[k].data();
      for (std::int64_t i = lo; i < hi; ++i) {
        const float ui = u[i] * mu - g[i] * lr;
        u[i] = ui;
        w[i] += ui * mu - g[i] * lr;
      }
    });
  } else {
    for_each_part(4, [&](std::size_t k, std::int64_t lo, std::int64_t hi) {
      float* __restrict w = params_[k].value.data();
      const float* __restrict g = params_[k].grad.data();
      float* __restrict u = velocity_[k].data();
      for (std::int64_t i = lo; i < hi; ++i) {
        const float ui = u[i] * mu - g[i] * lr;
        u[i] = ui;
        w[i] += ui;
      }
    });
  }
  ++iterations_;
}

std::vector<state_tensor> sgd::state() {
  std::vector<state_tensor> s;
  for (std::size_t k = 0; k < velocity_.size(); ++k) {
    s.push_back({"optimizer." + params_[k].name + ".momentum", params_[k].shape, velocity_[k]});
  }
  return s;
}

}  // namespace baton::worker
