// A named view of one parameter tensor and its gradient, as the model exposes them to optimizers
// and to checkpoint code. The model owns the storage; views stay valid for the model's lifetime
// (buffers are sized once at construction and never reallocated).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace baton::worker {

template <class S>
struct parameter {
  std::string name;  // "layers.{i}.kernel" ([inputs, units]) or "layers.{i}.bias" ([units])
  std::vector<std::int64_t> shape;
  std::span<S> value;  // row-major
  std::span<S> grad;   // dL/dvalue from the last train_step
};

}  // namespace baton::worker
