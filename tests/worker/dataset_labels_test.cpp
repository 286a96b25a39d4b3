// worker/dataset_labels.cpp: the label shaping every source ends with, called directly, and
// through a source where the message must name that source.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/dataset_fixtures.h"
#include "worker/dataset.h"
#include "worker/dataset_sources.h"

using namespace baton::worker::testing;
using baton::protocol::synthetic_data;
using baton::worker::raw_labels;
using baton::worker::row_matrix;
using baton::worker::shape_labels;

namespace {

raw_labels column(std::vector<double> values) {
  raw_labels r;
  r.rows = static_cast<std::int64_t>(values.size());
  r.cols = 1;
  r.values = std::move(values);
  return r;
}

std::string row_name(std::int64_t r) { return "src: row " + std::to_string(r); }

std::string shape_error(const raw_labels& raw, loss_kind loss, std::int64_t units) {
  auto y = shape_labels(raw, loss, units, "src", row_name);
  REQUIRE_FALSE(y);
  return y.error().message;
}

}  // namespace

TEST_CASE("one column of class ids becomes one-hot for a categorical loss with several units",
          "[unit][dataset][labels]") {
  auto y = shape_labels(column({2, 0}), loss_kind::categorical_crossentropy, 3, "src", row_name);
  REQUIRE(y);
  row_matrix<float> want(2, 3);
  want << 0, 0, 1, 1, 0, 0;
  CHECK(*y == want);
  // One unit: nothing to encode, the column is taken as it is.
  auto one = shape_labels(column({0.25}), loss_kind::categorical_crossentropy, 1, "src", row_name);
  REQUIRE(one);
  CHECK((*one)(0, 0) == 0.25f);
}

TEST_CASE("labels must be finite and fit a float32", "[unit][dataset][labels]") {
  CHECK(shape_error(column({0, std::nan("")}), loss_kind::mse, 1) ==
        "src: row 1: label is nan; labels must be finite");
  CHECK(shape_error(column({1e39}), loss_kind::mse, 1) ==
        "src: row 0: label 1e+39 is outside the float32 range");
  CHECK(shape_error(column({std::numeric_limits<double>::infinity()}),
                    loss_kind::categorical_crossentropy,
                    2) == "src: row 0: label is inf; labels must be finite");
}

TEST_CASE("labels of the wrong width are refused, named by their source",
          "[unit][dataset][labels]") {
  CHECK(shape_error(column({0, 1}), loss_kind::binary_crossentropy, 2) ==
        "src: labels have 1 column but the model has 2 output units (loss binary_crossentropy)");
  map_env e;
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{10, 4, 1}, loss_kind::mse, 3)),
             Catch::Contains("labels have 1 column but the model has 3 output units (loss mse)"));
}
