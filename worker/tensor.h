// The worker's matrix vocabulary: row-major Eigen matrices (one sample per row, as datasets and
// Keras lay them out) and maps over caller-owned storage. Layers own max-batch-sized storage and
// hand out maps over its first `rows` rows, so a short final batch never allocates.
#pragma once

#include <Eigen/Core>
#include <cstdint>

namespace baton::worker {

using idx = Eigen::Index;

template <class S>
using row_matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using row_vector = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <class S>
using matrix_map = Eigen::Map<row_matrix<S>>;
template <class S>
using const_matrix_map = Eigen::Map<const row_matrix<S>>;

}  // namespace baton::worker
