// Builds the worker's float model holding reference_net's weights and runs the reference batches
// through model + optimizer, for the Adam and SGD Keras-semantics tests.
#pragma once

#include <memory>

#include "reference_net.h"
#include "test_support.h"
#include "worker/model.h"
#include "worker/optimizer.h"

namespace baton::worker::testing {

inline model<float> reference_model() {
  protocol::model_spec spec;
  spec.layers = {{4, activation::relu}, {1, activation::sigmoid}};
  auto m = model<float>::create(spec, 3, loss_kind::binary_crossentropy, 4).value();
  reference_net ref;
  auto flat = ref.flat();
  std::size_t k = 0;
  for (auto& p : m.parameters()) {
    for (auto& v : p.value) v = static_cast<float>(*flat[k++]);
  }
  return m;
}

// Runs the three reference batches through one train_step + step() each.
inline void run_reference_batches(model<float>& m, optimizer& opt) {
  const auto xs = reference_batches_x();
  const auto ys = reference_batches_y();
  for (std::size_t b = 0; b < xs.size(); ++b) {
    row_matrix<float> x(static_cast<idx>(xs[b].size()), 3), y(x.rows(), 1);
    for (idx r = 0; r < x.rows(); ++r) {
      for (idx c = 0; c < 3; ++c) x(r, c) = static_cast<float>(xs[b][r][c]);
      y(r, 0) = static_cast<float>(ys[b][r]);
    }
    m.train_step({x.data(), x.rows(), 3}, {y.data(), y.rows(), 1});
    opt.step();
  }
}

inline std::vector<float> flat_values(model<float>& m) {
  std::vector<float> v;
  for (auto& p : m.parameters()) v.insert(v.end(), p.value.begin(), p.value.end());
  return v;
}

}  // namespace baton::worker::testing
