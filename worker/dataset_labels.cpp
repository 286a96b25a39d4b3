// Label shaping for every data source (see worker/dataset_sources.h), and the text helpers the
// loaders' error messages share.
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>
#include <utility>

#include "worker/dataset_sources.h"

namespace baton::worker {

using protocol::loss_kind;

std::string format_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc{}) return "?";
  return std::string(buf, end);
}

std::string in_quotes(std::string_view s) {
  // Built by appends: GCC 12 gives a false -Wrestrict on "\"" + std::string(s) at -O3.
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

namespace {

// Local rather than protocol::to_string so the worker library does not need job_spec.cpp linked.
std::string loss_name(loss_kind l) {
  switch (l) {
    case loss_kind::binary_crossentropy:
      return "binary_crossentropy";
    case loss_kind::categorical_crossentropy:
      return "categorical_crossentropy";
    case loss_kind::mse:
      return "mse";
  }
  return "unknown";
}

// Eigen's catch-all converting constructor makes result<row_matrix<float>> ambiguous from an error.
result<row_matrix<float>> matrix_error(std::string message) {
  return {boost::system::in_place_error, make_error(std::move(message))};
}

}  // namespace

result<row_matrix<float>> shape_labels(const raw_labels& raw, loss_kind loss, std::int64_t units,
                                       const std::string& source, const row_namer& where) {
  for (std::int64_t r = 0; r < raw.rows; ++r) {
    for (std::int64_t c = 0; c < raw.cols; ++c) {
      const double v = raw.values[static_cast<std::size_t>(r * raw.cols + c)];
      if (!std::isfinite(v)) {
        return matrix_error(where(r) + ": label is " + format_number(v) +
                            "; labels must be finite");
      }
    }
  }
  const bool class_ids = loss == loss_kind::categorical_crossentropy && raw.cols == 1 && units > 1;
  if (class_ids) {
    row_matrix<float> y = row_matrix<float>::Zero(raw.rows, units);
    for (std::int64_t r = 0; r < raw.rows; ++r) {
      const double v = raw.values[static_cast<std::size_t>(r)];
      if (v != std::floor(v)) {
        return matrix_error(where(r) + ": class label " + format_number(v) + " is not an integer");
      }
      if (v < 0 || v >= static_cast<double>(units)) {
        return matrix_error(where(r) + ": class label " + format_number(v) + " is outside [0, " +
                            std::to_string(units) + ") for a model with " + std::to_string(units) +
                            " output units");
      }
      y(r, static_cast<Eigen::Index>(v)) = 1.0f;
    }
    return y;
  }
  if (raw.cols != units) {
    return matrix_error(source + ": labels have " + std::to_string(raw.cols) + " column" +
                        (raw.cols == 1 ? "" : "s") + " but the model has " + std::to_string(units) +
                        " output unit" + (units == 1 ? "" : "s") + " (loss " + loss_name(loss) +
                        ")");
  }
  row_matrix<float> y(raw.rows, raw.cols);
  for (std::int64_t r = 0; r < raw.rows; ++r) {
    for (std::int64_t c = 0; c < raw.cols; ++c) {
      const double v = raw.values[static_cast<std::size_t>(r * raw.cols + c)];
      if (loss == loss_kind::binary_crossentropy && v != 0.0 && v != 1.0) {
        return matrix_error(where(r) + ": binary_crossentropy labels must be 0 or 1, got " +
                            format_number(v));
      }
      const float f = static_cast<float>(v);
      if (!std::isfinite(f)) {
        return matrix_error(where(r) + ": label " + format_number(v) +
                            " is outside the float32 range");
      }
      y(r, c) = f;
    }
  }
  return y;
}

}  // namespace baton::worker
