// A named view of one parameter tensor and its gradient, as the model exposes them to optimizers
// and to checkpoint code. The model owns the storage; views stay valid for the model's lifetime
// (buffers are sized once at construction and never reallocated).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "os/huge_pages.h"

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
// address space until written (no page is faulted in by the allocation). Large arrays get huge
// pages (os::advise_huge_pages) before their first write, so filling them, by the zeroing or by
// a restore, faults once per 2 MiB.
template <class S>
std::unique_ptr<S[]> make_storage(std::size_t n, storage_fill fill) {
  auto p = std::make_unique_for_overwrite<S[]>(n);
  os::advise_huge_pages(p.get(), n * sizeof(S));
  if (fill == storage_fill::zeroed) std::fill(p.get(), p.get() + n, S(0));
  return p;
}

}  // namespace baton::worker
