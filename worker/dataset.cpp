// load_dataset(): checks what every source needs (an output unit), then hands the data_spec to
// its source's loader (dataset_synthetic.cpp, dataset_csv.cpp, dataset_npy.cpp).
#include "worker/dataset.h"

#include <string>
#include <variant>

#include "worker/dataset_sources.h"

namespace baton::worker {

namespace {

status check_units(std::int64_t units) {
  if (units <= 0) {
    return make_error("dataset: the model must have at least one output unit, got " +
                      std::to_string(units));
  }
  return {};
}

}  // namespace

result<dataset> load_dataset(os::env& e, const protocol::data_spec& spec, protocol::loss_kind loss,
                             std::int64_t output_units) {
  if (auto ok = check_units(output_units); !ok) return ok.error();
  if (const auto* s = std::get_if<protocol::synthetic_data>(&spec)) {
    return load_synthetic(*s, loss, output_units);
  }
  if (const auto* c = std::get_if<protocol::csv_data>(&spec)) {
    return load_csv(e, *c, loss, output_units);
  }
  return load_npy(e, std::get<protocol::npy_data>(spec), loss, output_units);
}

}  // namespace baton::worker
