#include "worker/model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

#include "worker/optimizer.h"
#include "worker/parallel.h"
#include "worker/random.h"

namespace baton::worker {

template <class S>
model<S>::model(idx inputs, std::vector<dense_layer<S>> layers, loss_function<S> loss)
    : inputs_(inputs), layers_(std::move(layers)), loss_(loss) {
  for (const auto& l : layers_) {
    scratch_stride_ = std::max(scratch_stride_, static_cast<std::size_t>(l.scratch_size()));
  }
  reserve_scratch();
}

template <class S>
void model<S>::reserve_scratch() {
  const std::size_t needed = static_cast<std::size_t>(thread_count()) * scratch_stride_;
  if (scratch_.size() < needed) scratch_.resize(needed);
}

template <class S>
result<model<S>> model<S>::create(const protocol::model_spec& spec, idx inputs, loss_kind loss,
                                  idx max_batch, storage_fill fill) {
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
    layers.emplace_back(width, static_cast<idx>(l.units), l.act, max_batch, fill,
                        i == 0 ? input_gradient::not_needed : input_gradient::computed);
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
std::int64_t model<S>::flops_per_row() const {
  std::int64_t f = 0;
  for (const auto& l : layers_) f += 2 * l.inputs() * l.units();
  return f;
}

template <class S>
const_matrix_map<S> model<S>::forward(const_matrix_map<S> x) {
  assert(x.cols() == inputs_ && x.rows() <= max_batch());
  run_team(x.rows() * flops_per_row(), [&](const team& t) {
    const S* in = x.data();
    idx cols = x.cols();
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const bool last = i + 1 == layers_.size();
      layers_[i].forward_team(const_matrix_map<S>(in, x.rows(), cols),
                              !(last && loss_.takes_logits()), t);
      in = layers_[i].output().data();
      cols = layers_[i].units();
    }
  });
  return layers_.back().output();
}

template <class S>
double model<S>::step(const_matrix_map<S> x, const_matrix_map<S> y, const gradient_sink<S>* sinks) {
  assert(y.rows() == x.rows() && y.cols() == outputs());
  assert(x.cols() == inputs_ && x.rows() <= max_batch());
  reserve_scratch();
  double loss = 0;
  // One team for the whole step: phases meet at barriers instead of waking threads per product.
  run_team(3 * x.rows() * flops_per_row(), [&](const team& t) {
    const S* in = x.data();
    idx cols = x.cols();
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const bool last = i + 1 == layers_.size();
      layers_[i].forward_team(const_matrix_map<S>(in, x.rows(), cols),
                              !(last && loss_.takes_logits()), t);
      in = layers_[i].output().data();
      cols = layers_[i].units();
    }
    auto& top = layers_.back();
    if (t.id == 0) {
      last_hits_ = loss_.accuracy(top.output(), y);
      loss = loss_.forward_backward(top.output(), y, top.output_grad());
      top.prepare_output_grad(loss_.takes_logits());
    }
    t.barrier();
    // Each layer's backward also prepares the dL/dZ of the layer below: one barrier per layer.
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const_matrix_map<S> below = i == 0 ? x : layers_[i - 1].output();
      layers_[i].backward_team(below, t, scratch_.data() + t.id * scratch_stride_,
                               sinks ? sinks + i : nullptr, i == 0 ? nullptr : &layers_[i - 1]);
    }
  });
  return loss;
}

template <class S>
double model<S>::train_step(const_matrix_map<S> x, const_matrix_map<S> y) {
  return step(x, y, nullptr);
}

template <class S>
double model<S>::train_step(const_matrix_map<S> x, const_matrix_map<S> y,
                            optimizer& opt) requires std::same_as<S, float> {
  const auto& bound = opt.bound_parameters();
  bool mine = bound.size() == 2 * layers_.size();
  for (std::size_t i = 0; mine && i < layers_.size(); ++i) {
    mine = bound[2 * i].value.data() == layers_[i].kernel().data() &&
           bound[2 * i + 1].value.data() == layers_[i].bias().data();
  }
  if (!mine) {
    const double loss = train_step(x, y);
    opt.step();
    return loss;
  }
  // At most a handful of layers: sinks live on the stack for small models, else one allocation.
  constexpr std::size_t inline_layers = 16;
  gradient_sink<S> inline_sinks[inline_layers];
  std::vector<gradient_sink<S>> heap_sinks;
  gradient_sink<S>* sinks = inline_sinks;
  if (layers_.size() > inline_layers) {
    heap_sinks.resize(layers_.size());
    sinks = heap_sinks.data();
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    sinks[i] = {
        [](void* ctx, std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) {
          static_cast<optimizer*>(ctx)->update(k, begin, end, grad);
        },
        &opt, 2 * i, 2 * i + 1};
  }
  opt.begin_update();
  const double loss = step(x, y, sinks);
  opt.end_update();
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
