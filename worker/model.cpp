#include "worker/model.h"

#include <cassert>
#include <cmath>
#include <string>

#include "worker/optimizer.h"
#include "worker/random.h"

namespace baton::worker {

template <class S>
model<S>::model(idx inputs, std::vector<dense_layer<S>> layers, loss_function<S> loss)
    : inputs_(inputs), layers_(std::move(layers)), loss_(loss) {}

template <class S>
result<model<S>> model<S>::create(const protocol::model_spec& spec, idx inputs, loss_kind loss,
                                  idx max_batch) {
  if (inputs <= 0) {
    return make_error("model: the data has " + std::to_string(inputs) +
                      " features; a dense model needs at least one");
  }
  if (max_batch <= 0) {
    return make_error("training.batch_size: expected a positive integer, got " +
                      std::to_string(max_batch));
  }
  if (spec.layers.empty()) return make_error("model.layers: expected at least one layer");
  std::vector<dense_layer<S>> layers;
  layers.reserve(spec.layers.size());
  idx width = inputs;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const auto& l = spec.layers[i];
    if (l.units <= 0) {
      return make_error("model.layers[" + std::to_string(i) +
                        "].units: expected a positive integer, got " + std::to_string(l.units));
    }
    layers.emplace_back(width, static_cast<idx>(l.units), l.act, max_batch);
    width = static_cast<idx>(l.units);
  }
  loss_function<S> lf(loss, spec.layers.back().act);
  return model(inputs, std::move(layers), lf);
}

template <class S>
void model<S>::init_glorot(std::uint64_t seed) {
  rng r(seed);
  for (auto& l : layers_) {
    const double limit = std::sqrt(6.0 / static_cast<double>(l.inputs() + l.units()));
    auto& k = l.kernel();
    for (idx i = 0; i < k.rows(); ++i) {
      for (idx j = 0; j < k.cols(); ++j) k(i, j) = static_cast<S>(r.uniform(-limit, limit));
    }
    l.bias().setZero();
  }
}

template <class S>
const_matrix_map<S> model<S>::forward(const_matrix_map<S> x) {
  assert(x.cols() == inputs_ && x.rows() <= max_batch());
  const S* data = x.data();
  idx cols = x.cols();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const bool last = i + 1 == layers_.size();
    const auto out = layers_[i].forward(const_matrix_map<S>(data, x.rows(), cols),
                                        !(last && loss_.takes_logits()));
    data = out.data();
    cols = out.cols();
  }
  return const_matrix_map<S>(data, x.rows(), cols);
}

template <class S>
double model<S>::train_step(const_matrix_map<S> x, const_matrix_map<S> y) {
  assert(y.rows() == x.rows() && y.cols() == outputs());
  const_matrix_map<S> out = forward(x);
  auto& last = layers_.back();
  const double loss = loss_.forward_backward(out, y, last.output_grad());
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const bool is_last = i + 1 == layers_.size();
    const_matrix_map<S> in = i == 0 ? x : layers_[i - 1].output();
    // dX of layer i lands directly in layer i-1's output-gradient buffer.
    S* dx = i == 0 ? nullptr : layers_[i - 1].output_grad_data();
    layers_[i].backward(in, is_last && loss_.takes_logits(), dx);
  }
  return loss;
}

template <class S>
double model<S>::train_step(const_matrix_map<S> x, const_matrix_map<S> y,
                            optimizer& opt) requires std::same_as<S, float> {
  const double loss = train_step(x, y);
  opt.step();
  return loss;
}

template <class S>
evaluation model<S>::evaluate(const_matrix_map<S> x, const_matrix_map<S> y) {
  assert(y.rows() == x.rows() && x.cols() == inputs_ && y.cols() == outputs());
  evaluation e;
  double loss_sum = 0.0;
  accuracy_count hits;
  for (idx r0 = 0; r0 < x.rows(); r0 += max_batch()) {
    const idx n = std::min(max_batch(), x.rows() - r0);
    const_matrix_map<S> xb(x.data() + r0 * x.cols(), n, x.cols());
    const_matrix_map<S> yb(y.data() + r0 * y.cols(), n, y.cols());
    const_matrix_map<S> out = forward(xb);
    loss_sum += loss_.sum(out, yb);
    const accuracy_count c = loss_.accuracy(out, yb);
    hits.correct += c.correct;
    hits.total += c.total;
  }
  e.samples = x.rows();
  if (e.samples > 0) e.loss = loss_sum / static_cast<double>(e.samples);
  if (hits.total > 0) e.accuracy = static_cast<double>(hits.correct) / hits.total;
  return e;
}

template <class S>
const_matrix_map<S> model<S>::predict_batch(const_matrix_map<S> x) {
  forward(x);
  if (loss_.takes_logits()) layers_.back().activate_output();
  return layers_.back().output();
}

template <class S>
status model<S>::check_data_shape(idx features, idx label_columns) const {
  if (features != inputs_) {
    return make_error("data: " + std::to_string(features) + " feature columns, but the model was " +
                      "built for " + std::to_string(inputs_));
  }
  if (label_columns != outputs()) {
    return make_error("data: " + std::to_string(label_columns) +
                      " label columns, but the last layer (model.layers[" +
                      std::to_string(layers_.size() - 1) + "]) has " + std::to_string(outputs()) +
                      " units");
  }
  return {};
}

template <class S>
std::vector<parameter<S>> model<S>::parameters() {
  std::vector<parameter<S>> p;
  p.reserve(2 * layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    const std::string prefix = "layers." + std::to_string(i) + ".";
    p.push_back({prefix + "kernel",
                 {l.inputs(), l.units()},
                 {l.kernel().data(), static_cast<std::size_t>(l.kernel().size())},
                 {l.kernel_grad().data(), static_cast<std::size_t>(l.kernel_grad().size())}});
    p.push_back({prefix + "bias",
                 {l.units()},
                 {l.bias().data(), static_cast<std::size_t>(l.bias().size())},
                 {l.bias_grad().data(), static_cast<std::size_t>(l.bias_grad().size())}});
  }
  return p;
}

template <class S>
std::int64_t model<S>::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& l : layers_) n += l.kernel().size() + l.bias().size();
  return n;
}

template class model<float>;
template class model<double>;

}  // namespace baton::worker
