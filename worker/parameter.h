// A named view of one parameter tensor and its gradient, as the model exposes them to optimizers
// and to checkpoint code. The model owns the storage; views stay valid for the model's lifetime
// (buffers are sized once at construction and never reallocated).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "os/huge_pages.h"
#include "worker/parallel.h"

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
// page of the state once for nothing. `faulted_in`: as uninitialised, but every page made
// resident, by one write per 4 KiB, so the fill that follows meets no page fault: for a worker
// started ahead, which has time before its restore and none after. Zeroing would do that too,
// but writes every byte: a fifth of such a worker's set-up for the seed job.
enum class storage_fill { zeroed, uninitialised, faulted_in };

// Writes one element of every 4 KiB page of [p, p + n), and the last: every page resident, the
// other elements as they were. From 4 MiB on, the pages are shared across the worker's threads:
// the kernel's zeroing of each page is most of a fault, and it runs on the faulting core, so two
// cores fault in a started-ahead worker's 48 MiB state in about two thirds of the time.
// Each thread's part is first populated in one call (os::populate_pages), where the OS can: its
// writes then meet resident pages. On a VM where a fault cost 10 us, 16 MiB of small pages took
// 40 ms by writes alone and 2.5 + 18 ms populated first (the writes still pay the hypervisor's
// own first touch).
template <class S>
void fault_in(S* p, std::size_t n) {
  constexpr std::size_t stride = std::max<std::size_t>(1, 4096 / sizeof(S));
  const auto pages = static_cast<std::int64_t>((n + stride - 1) / stride);
  const auto touch = [p, n](std::int64_t begin, std::int64_t end) {
    const std::size_t from = static_cast<std::size_t>(begin) * stride;
    const std::size_t to = std::min(n, static_cast<std::size_t>(end) * stride);
    if (to > from) os::populate_pages(p + from, (to - from) * sizeof(S));
    for (std::int64_t i = begin; i < end; ++i) p[static_cast<std::size_t>(i) * stride] = S(0);
  };
  // parallel_for's own threshold: sharing pays from 1024 pages (4 MiB) on.
  constexpr std::int64_t cost_per_page = min_parallel_work / 1024;
  parallel_for(pages, cost_per_page, touch);
  if (n > 0) p[n - 1] = S(0);
}

// Readies [p, p + n), just allocated and not yet written, as `fill` says: huge pages advised
// first (a large buffer then faults in 2 MiB at a time, whoever writes it first; a small one is
// left alone), then zeroed, faulted in, or left as it is. The one place every kind of storage
// (make_storage's arrays, and through them a layer's kernel; a layer's bias) is readied.
template <class S>
void prepare_storage(S* p, std::size_t n, storage_fill fill) {
  os::advise_huge_pages(p, n * sizeof(S));
  switch (fill) {
    case storage_fill::zeroed:
      std::fill(p, p + n, S(0));
      break;
    case storage_fill::faulted_in:
      fault_in(p, n);
      break;
    case storage_fill::uninitialised:
      break;
  }
}

// Frees an array make_storage made.
struct storage_free {
  void operator()(void* p) const noexcept { os::free_large_buffer(p); }
};

// An array make_storage made: S is trivial, so nothing is destroyed but the memory.
template <class S>
using storage = std::unique_ptr<S[], storage_free>;

// An array of n elements, zeroed or not as `fill` says. Uninitialised, a large array is only
// address space until written (no page is faulted in by the allocation). An array of 2 MiB or
// more starts on a huge page (os::allocate_large_buffer), and its huge pages are advised before
// its first write, so filling it, by the zeroing or by a restore, faults once per 2 MiB up to its
// last partial huge page. Throws std::bad_alloc as `new` does.
template <class S>
storage<S> make_storage(std::size_t n, storage_fill fill) {
  static_assert(std::is_trivial_v<S>);
  if (n > std::numeric_limits<std::size_t>::max() / sizeof(S)) throw std::bad_array_new_length();
  storage<S> p(static_cast<S*>(os::allocate_large_buffer(n * sizeof(S))));
  if (!p) throw std::bad_alloc();
  prepare_storage(p.get(), n, fill);
  return p;
}

}  // namespace baton::worker
