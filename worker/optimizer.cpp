#include "worker/optimizer.h"

#include <cmath>

#include "worker/adam.h"
#include "worker/optimizer_impl.h"
#include "worker/sgd.h"

namespace baton::worker {

optimizer::optimizer(std::vector<parameter<float>> params) : params_(std::move(params)) {
  offsets_.reserve(params_.size() + 1);
  std::int64_t total = 0;
  for (const auto& p : params_) {
    offsets_.push_back(total);
    total += static_cast<std::int64_t>(p.value.size());
  }
  offsets_.push_back(total);
}

void optimizer::step() {
  begin_update();
  for_each_part(8, [&](std::size_t k, std::int64_t lo, std::int64_t hi) {
    update(k, lo, hi, params_[k].grad.data() + lo);
  });
  end_update();
}

result<std::unique_ptr<optimizer>> make_optimizer(const protocol::optimizer_spec& spec,
                                                  std::vector<parameter<float>> params,
                                                  storage_fill fill) {
  const auto bad = [](const char* field, const char* expected, double got) {
    return make_error(std::string("training.optimizer.") + field + ": expected " + expected +
                      ", got " + std::to_string(got));
  };
  if (!std::isfinite(spec.learning_rate) || spec.learning_rate < 0) {
    return bad("learning_rate", "a finite number >= 0", spec.learning_rate);
  }
  switch (spec.kind) {
    case protocol::optimizer_kind::adam:
      if (!(spec.beta_1 >= 0 && spec.beta_1 < 1))
        return bad("beta_1", "0 <= beta_1 < 1", spec.beta_1);
      if (!(spec.beta_2 >= 0 && spec.beta_2 < 1))
        return bad("beta_2", "0 <= beta_2 < 1", spec.beta_2);
      if (!(spec.epsilon >= 0) || !std::isfinite(spec.epsilon)) {
        return bad("epsilon", "a finite number >= 0", spec.epsilon);
      }
      return std::unique_ptr<optimizer>(new adam(spec, std::move(params), fill));
    case protocol::optimizer_kind::sgd:
      if (!(spec.momentum >= 0 && spec.momentum <= 1)) {
        return bad("momentum", "0 <= momentum <= 1", spec.momentum);
      }
      return std::unique_ptr<optimizer>(new sgd(spec, std::move(params), fill));
  }
  return make_error("training.optimizer.kind: unknown optimizer");
}

}  // namespace baton::worker
