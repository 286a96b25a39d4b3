// A rows x cols row-major matrix whose storage comes from make_storage rather than from Eigen's
// malloc, so a large one starts on a huge page (os::allocate_large_buffer): a layer's kernel is
// the biggest buffer a worker fills at start-up, and where malloc puts it left up to 4 MiB of it
// on small pages. The matrix owns its storage; view() is an Eigen map over it, valid while the
// matrix lives (a move hands the storage, and the map with it, to the new owner). Fixed in size.
#pragma once

#include <new>
#include <utility>

#include "worker/parameter.h"
#include "worker/tensor.h"

namespace baton::worker {

template <class S>
class large_matrix {
 public:
  large_matrix(idx rows, idx cols, storage_fill fill)
      : data_(make_storage<S>(static_cast<std::size_t>(rows * cols), fill)),
        map_(data_.get(), rows, cols) {}
  large_matrix(large_matrix&& o) noexcept
      : data_(std::move(o.data_)), map_(data_.get(), o.map_.rows(), o.map_.cols()) {
    o.reset_view();
  }
  large_matrix& operator=(large_matrix&& o) noexcept {
    if (this != &o) {
      data_ = std::move(o.data_);
      // A map's assignment copies elements: rebinding one takes a new map in its place.
      new (&map_) matrix_map<S>(data_.get(), o.map_.rows(), o.map_.cols());
      o.reset_view();
    }
    return *this;
  }
  large_matrix(const large_matrix&) = delete;
  large_matrix& operator=(const large_matrix&) = delete;

  matrix_map<S>& view() { return map_; }
  const matrix_map<S>& view() const { return map_; }

 private:
  void reset_view() { new (&map_) matrix_map<S>(nullptr, 0, 0); }

  storage<S> data_;
  matrix_map<S> map_;
};

}  // namespace baton::worker
