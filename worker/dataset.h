// The worker's training data: a job's data_spec (synthetic, CSV or .npy) turned into a feature
// matrix and a label matrix shaped for the job's loss. Loading owns all validation of the data
// itself (numbers, shapes, label ranges); every error names the file and the line, row or byte
// offset. Files are read through baton::os::env so tests can substitute fakes. The trainer owns the
// returned matrices; nothing here keeps state between calls. One source file per data source
// (worker/dataset_sources.h lists them and what they share).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "protocol/job_spec.h"
#include "worker/tensor.h"

namespace baton::os {
class env;
}

namespace baton::worker {

struct dataset {
  row_matrix<float> x;  // samples x features, all finite
  row_matrix<float> y;  // samples x output_units (one-hot for categorical class labels)
};

// Loads and validates the data a job names. Labels come out with exactly `output_units` columns:
// - categorical_crossentropy: a single label column (CSV) or a 1-D array (.npy) holds integer
//   class ids in [0, output_units) and is one-hot encoded; a 2-D .npy array of width
//   output_units is taken as is.
// - binary_crossentropy: labels must be 0 or 1, width output_units (one column for one unit).
// - mse: any finite values, width output_units.
// CSV errors use 1-based line and column numbers ("data.csv:17: column 3 ("age"): ..."); .npy
// errors use 0-based sample indexes, as numpy does.
result<dataset> load_dataset(os::env& e, const protocol::data_spec& spec, protocol::loss_kind loss,
                             std::int64_t output_units);

// The synthetic generator on its own: X ~ N(0, 1) filled row by row, y = (row sum > 0) as one
// 0/1 column, the sum taken in double over the float values stored in X. Bit-identical on every
// platform for a given seed (worker/random.h); labels are not yet shaped for a loss.
result<dataset> generate_synthetic(const protocol::synthetic_data& spec);

}  // namespace baton::worker
