// The synthetic source: a seeded, platform-independent classification workload (dataset.h's
// generate_synthetic says what it draws), needing no file; its 0/1 column is then shaped for
// the loss like any other labels.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "worker/dataset.h"
#include "worker/dataset_sources.h"
#include "worker/random.h"

namespace baton::worker {

result<dataset> generate_synthetic(const protocol::synthetic_data& spec) {
  if (spec.samples <= 0 || spec.features <= 0) {
    return make_error("synthetic data: samples and features must be positive, got " +
                      std::to_string(spec.samples) + " x " + std::to_string(spec.features));
  }
  if (spec.samples > std::numeric_limits<std::int32_t>::max() / spec.features) {
    return make_error("synthetic data: " + std::to_string(spec.samples) + " x " +
                      std::to_string(spec.features) + " is too large");
  }
  dataset out;
  out.x.resize(spec.samples, spec.features);
  out.y.resize(spec.samples, 1);
  rng gen(spec.seed);
  // Row-major x takes the normals in draw order, a block of rows at a time, so the scratch stays
  // near 512 KiB whatever the data's size.
  const Eigen::Index cols = out.x.cols();
  const Eigen::Index block_rows = std::max<Eigen::Index>(1, (Eigen::Index{1} << 16) / cols);
  std::vector<double> drawn;
  for (Eigen::Index r0 = 0; r0 < out.x.rows(); r0 += block_rows) {
    const Eigen::Index rows = std::min(block_rows, out.x.rows() - r0);
    drawn.resize(static_cast<std::size_t>(rows * cols));
    gen.normals(drawn);
    for (Eigen::Index r = 0; r < rows; ++r) {
      double sum = 0;
      for (Eigen::Index c = 0; c < cols; ++c) {
        const float v = static_cast<float>(drawn[static_cast<std::size_t>(r * cols + c)]);
        out.x(r0 + r, c) = v;
        sum += static_cast<double>(v);
      }
      out.y(r0 + r, 0) = sum > 0 ? 1.0f : 0.0f;
    }
  }
  return out;
}

result<dataset> load_synthetic(const protocol::synthetic_data& spec, protocol::loss_kind loss,
                               std::int64_t units) {
  auto d = generate_synthetic(spec);
  if (!d) return d.error();
  raw_labels labels;
  labels.rows = d->y.rows();
  labels.cols = 1;
  labels.values.assign(d->y.data(), d->y.data() + d->y.size());
  auto y = shape_labels(labels, loss, units, "synthetic data", [](std::int64_t r) {
    return "synthetic data: sample " + std::to_string(r);
  });
  if (!y) return y.error();
  d->y = std::move(*y);
  return d;
}

}  // namespace baton::worker
