// What the per-source files of the dataset loader share, internal to worker/dataset*.cpp:
// the label shaping every source ends with (dataset_labels.cpp), the text helpers its error
// messages use, and each source's entry point for load_dataset()'s dispatch (dataset.cpp).
// One file per source: dataset_csv.cpp, dataset_npy.cpp, dataset_synthetic.cpp. The public
// interface is worker/dataset.h; nothing outside the loader includes this header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "protocol/job_spec.h"
#include "worker/dataset.h"
#include "worker/tensor.h"

namespace baton::os {
class env;
}

namespace baton::worker {

// Shortest round-trip form, locale-independent: "2.5", "nan", "1e+39".
std::string format_number(double v);
std::string in_quotes(std::string_view s);

// Label values as a source read them, before they are shaped for the loss.
struct raw_labels {
  std::vector<double> values;  // rows x cols, row-major
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

// Names where row `r` of the labels came from, e.g. "data.csv:17: column 5 ("label")".
using row_namer = std::function<std::string(std::int64_t)>;

// The one place that turns raw label values into the y the loss expects (the rules are in
// dataset.h's load_dataset). `source` names the labels as a whole, `where` one row of them.
result<row_matrix<float>> shape_labels(const raw_labels& raw, protocol::loss_kind loss,
                                       std::int64_t units, const std::string& source,
                                       const row_namer& where);

result<dataset> load_synthetic(const protocol::synthetic_data& spec, protocol::loss_kind loss,
                               std::int64_t units);
result<dataset> load_csv(os::env& e, const protocol::csv_data& spec, protocol::loss_kind loss,
                         std::int64_t units);
result<dataset> load_npy(os::env& e, const protocol::npy_data& spec, protocol::loss_kind loss,
                         std::int64_t units);

}  // namespace baton::worker
