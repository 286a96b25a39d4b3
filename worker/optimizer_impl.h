// Internal to the optimizers (adam.cpp, sgd.cpp): the static-partition walk over all parameters
// laid end to end. Kept out of optimizer.h so the trainer does not see OpenMP details.
#pragma once

#include <algorithm>

#include "worker/optimizer.h"
#include "worker/parallel.h"

namespace baton::worker {

template <class F>
void optimizer::for_each_part(std::int64_t cost_per_element, F&& f) {
  parallel_for(offsets_.back(), cost_per_element, [&](std::int64_t begin, std::int64_t end) {
    // First tensor overlapping [begin, end): offsets_ is sorted.
    auto it = std::upper_bound(offsets_.begin(), offsets_.end(), begin);
    for (std::size_t k = static_cast<std::size_t>(it - offsets_.begin()) - 1;
         k < params_.size() && offsets_[k] < end; ++k) {
      const std::int64_t lo = std::max(begin, offsets_[k]) - offsets_[k];
      const std::int64_t hi = std::min(end, offsets_[k + 1]) - offsets_[k];
      if (lo < hi) f(k, lo, hi);
    }
  });
}

}  // namespace baton::worker
