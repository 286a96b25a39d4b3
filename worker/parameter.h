// A named view of one parameter tensor and its gradient, as the model exposes them to optimizers
// and to checkpoint code. The model owns the storage; views stay valid for the model's lifetime
// (buffers are sized once at construction and never reallocated).
#pragma once

#include <cstdint>
#include <memory>
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

// How new parameter and optimizer-state storage starts. `uninitialised` only for storage that is
// overwritten whole before it is read (a resume's restore): zeroing it first would touch every
// page of the state once for nothing.
enum class storage_fill { zeroed, uninitialised };

// An array of n elements, zeroed or not as `fill` says. Uninitialised, a large array is only
// address space until written (no page is faulted in by the allocation).
template <class S>
std::unique_ptr<S[]> make_storage(std::size_t n, storage_fill fill) {
  return fill == storage_fill::zeroed ? std::make_unique<S[]>(n)
                                      : std::make_unique_for_overwrite<S[]>(n);
}

}  // namespace baton::worker
