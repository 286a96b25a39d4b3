// worker/dataset_npy.cpp: .npy headers, dtypes and shapes as numpy writes them, and every error.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/dataset_fixtures.h"
#include "worker/dataset.h"

using namespace baton::worker::testing;
using baton::protocol::synthetic_data;
using baton::worker::row_matrix;

TEST_CASE("npy bytes exactly as numpy 1.24 writes them load", "[unit][dataset][npy]") {
  // np.save(f, np.arange(6, dtype='<f4').reshape(3, 2)): a 118-byte header dict.
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }" + std::string(58, ' ') + "\n";
  REQUIRE(header.size() == 118);
  const std::string x = std::string("\x93NUMPY\x01\x00v\x00", 10) + header +
                        raw_bytes(std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(x == x_f4_3x2);  // the test helper writes the same bytes
  auto d = load_npy_bytes(x, npy_file("|b1", "(3,)", std::string("\x01\x00\x01", 3)));
  REQUIRE(d);
  row_matrix<float> want(3, 2);
  want << 0, 1, 2, 3, 4, 5;
  CHECK(d->x == want);
  CHECK(d->y(0, 0) == 1.0f);
  CHECK(d->y(1, 0) == 0.0f);
}

TEST_CASE("npy f8 features with a v2 header and integer labels", "[unit][dataset][npy]") {
  const auto x = npy_file("<f8", "(2, 3)", raw_bytes(std::vector<double>{1, 2, 3, -4, 5e-3, 6}), 2);
  SECTION("i8 class ids become one-hot") {
    auto d = load_npy_bytes(x, npy_file("<i8", "(2,)", raw_bytes(std::vector<std::int64_t>{2, 0})),
                            loss_kind::categorical_crossentropy, 3);
    REQUIRE(d);
    CHECK(d->x(1, 0) == -4.0f);
    CHECK(d->x(1, 1) == 5e-3f);
    row_matrix<float> y(2, 3);
    y << 0, 0, 1, 1, 0, 0;
    CHECK(d->y == y);
  }
  SECTION("u1 binary labels") {
    auto d = load_npy_bytes(x, npy_file("|u1", "(2,)", std::string("\x01\x00", 2)));
    REQUIRE(d);
    CHECK(d->y(0, 0) == 1.0f);
  }
  SECTION("2-D f4 labels of width output_units are taken as is (v3 header)") {
    auto d = load_npy_bytes(
        x, npy_file("<f4", "(2, 2)", raw_bytes(std::vector<float>{0.25f, 0.75f, 1, 0}), 3),
        loss_kind::categorical_crossentropy, 2);
    REQUIRE(d);
    CHECK(d->y(0, 1) == 0.75f);
    CHECK(d->y(1, 0) == 1.0f);
  }
  SECTION("2-D single-column class ids") {
    auto d =
        load_npy_bytes(x, npy_file("<i4", "(2, 1)", raw_bytes(std::vector<std::int32_t>{1, 0})),
                       loss_kind::categorical_crossentropy, 2);
    REQUIRE(d);
    CHECK(d->y(0, 1) == 1.0f);
  }
  SECTION("negative class id") {
    CHECK(error_of(load_npy_bytes(x, npy_file("|i1", "(2,)", std::string("\x01\xff", 2)),
                                  loss_kind::categorical_crossentropy, 2)) ==
          "/d/y.npy: sample 1: class label -1 is outside [0, 2) for a model with 2 output units");
  }
  SECTION("label width mismatch") {
    CHECK(error_of(load_npy_bytes(
              x, npy_file("<f4", "(2, 2)", raw_bytes(std::vector<float>{0, 1, 1, 0})),
              loss_kind::mse, 3)) ==
          "/d/y.npy: labels have 2 columns but the model has 3 output units (loss mse)");
  }
}

TEST_CASE("npy error messages", "[unit][dataset][npy]") {
  const auto y3 = npy_file("<i8", "(3,)", raw_bytes(std::vector<std::int64_t>{0, 1, 1}));
  SECTION("bad magic") {
    CHECK(error_of(load_npy_bytes("PK\x03\x04 not npy at all", y3)) ==
          "/d/x.npy: not an .npy file (bad magic at byte 0; expected \\x93NUMPY)");
  }
  SECTION("unsupported version") {
    std::string x = x_f4_3x2;
    x[6] = 4;
    CHECK(error_of(load_npy_bytes(x, y3)) ==
          "/d/x.npy: unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
  }
  SECTION("header length past the end") {
    CHECK_THAT(error_of(load_npy_bytes(x_f4_3x2.substr(0, 40), y3)),
               Catch::Contains("/d/x.npy: header length 118 (at byte 8) runs past the end"));
  }
  SECTION("malformed dict names the byte offset") {
    std::string x = x_f4_3x2;
    x[10 + 8] = ';';  // {'descr'; ...
    CHECK(error_of(load_npy_bytes(x, y3)) == "/d/x.npy: malformed header at byte 18: expected ':'");
  }
  SECTION("missing key") {
    CHECK_THAT(error_of(load_npy_bytes(npy_with_header("{'descr': '<f4', 'shape': ()}", ""), y3)),
               Catch::Contains("no 'fortran_order' key"));
  }
  SECTION("fortran order") {
    CHECK(error_of(load_npy_bytes(
              npy_file("<f4", "(3, 2)", raw_bytes(std::vector<float>(6)), 1, true), y3)) ==
          "/d/x.npy: fortran_order is True; save with np.ascontiguousarray(arr) first");
  }
  SECTION("big-endian") {
    CHECK(error_of(load_npy_bytes(npy_file(">f4", "(3, 2)", std::string(24, '\0')), y3)) ==
          "/d/x.npy: big-endian dtype '>f4' is not supported; save with arr.astype('<f4')");
  }
  SECTION("unsupported dtypes are named") {
    CHECK_THAT(error_of(load_npy_bytes(npy_file("<c8", "(3, 2)", std::string(48, '\0')), y3)),
               Catch::Contains("unsupported dtype '<c8'"));
    CHECK_THAT(error_of(load_npy_bytes(x_f4_3x2, npy_file("<U3", "(3,)", std::string(36, '\0')))),
               Catch::Contains("/d/y.npy: unsupported dtype '<U3'"));
    CHECK_THAT(error_of(load_npy_bytes(x_f4_3x2, npy_file("<f2", "(3,)", std::string(6, '\0')))),
               Catch::Contains("unsupported dtype '<f2'"));
  }
  SECTION("structured dtype") {
    const auto x = npy_with_header(
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0'));
    CHECK_THAT(error_of(load_npy_bytes(x, y3)), Catch::Contains("structured dtypes"));
  }
  SECTION("integer features") {
    CHECK(error_of(load_npy_bytes(npy_file("<i8", "(3, 2)", std::string(48, '\0')), y3)) ==
          "/d/x.npy: features must be float32 ('<f4') or float64 ('<f8'), got '<i8'");
  }
  SECTION("wrong rank") {
    CHECK(error_of(load_npy_bytes(npy_file("<f4", "(6,)", std::string(24, '\0')), y3)) ==
          "/d/x.npy: features must be a 2-D array (samples, features), got shape (6,)");
    CHECK(error_of(load_npy_bytes(x_f4_3x2, npy_file("<f4", "(3, 1, 1)", std::string(12, '\0')))) ==
          "/d/y.npy: labels must be a 1-D or 2-D array, got shape (3, 1, 1)");
  }
  SECTION("data shorter or longer than the shape") {
    CHECK(error_of(load_npy_bytes(npy_file("<f4", "(3, 2)", std::string(20, '\0')), y3)) ==
          "/d/x.npy: data is shorter than the shape says: shape (3, 2) of '<f4' needs 24 bytes, "
          "the file has 20 (data starts at byte 128)");
    CHECK(error_of(load_npy_bytes(npy_file("<f4", "(3, 2)", std::string(28, '\0')), y3)) ==
          "/d/x.npy: data is longer than the shape says: shape (3, 2) of '<f4' needs 24 bytes, "
          "the file has 28 (data starts at byte 128)");
    CHECK_THAT(error_of(load_npy_bytes(
                   npy_file("<f4", "(4611686018427387904, 4)", std::string(24, '\0')), y3)),
               Catch::Contains("data is shorter than the shape says"));
  }
  SECTION("row count mismatch") {
    CHECK(error_of(load_npy_bytes(
              x_f4_3x2, npy_file("<i8", "(2,)", raw_bytes(std::vector<std::int64_t>{0, 1})))) ==
          "/d/x.npy, /d/y.npy: features have 3 rows, labels have 2");
  }
  SECTION("empty dataset") {
    CHECK(error_of(load_npy_bytes(npy_file("<f4", "(0, 2)", ""), npy_file("<i8", "(0,)", ""))) ==
          "/d/x.npy: no samples (shape (0, 2))");
  }
  SECTION("non-finite features name the sample and feature") {
    const float nan = std::nanf("");
    CHECK(error_of(load_npy_bytes(
              npy_file("<f4", "(3, 2)", raw_bytes(std::vector<float>{0, 1, 2, 3, 4, nan})), y3)) ==
          "/d/x.npy: sample 2, feature 1: value is nan; features must be finite");
    CHECK(error_of(load_npy_bytes(
              npy_file("<f8", "(3, 2)", raw_bytes(std::vector<double>{0, 1e300, 2, 3, 4, 5})),
              y3)) == "/d/x.npy: sample 0, feature 1: value 1e+300 is outside the float32 range");
  }
  SECTION("binary labels must be 0 or 1") {
    CHECK(error_of(load_npy_bytes(
              x_f4_3x2, npy_file("<i8", "(3,)", raw_bytes(std::vector<std::int64_t>{0, 1, 5})))) ==
          "/d/y.npy: sample 2: binary_crossentropy labels must be 0 or 1, got 5");
  }
}

TEST_CASE("truncated and corrupted npy files fail cleanly", "[unit][dataset][npy]") {
  const auto y3 = npy_file("<i8", "(3,)", raw_bytes(std::vector<std::int64_t>{0, 1, 1}));
  for (std::size_t n = 0; n < x_f4_3x2.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_FALSE(load_npy_bytes(x_f4_3x2.substr(0, n), y3));
  }
  // Every single-byte change in the header either fails or still describes a 3 x 2 array (the
  // padding is free); none may crash or read out of bounds.
  for (std::size_t i = 0; i < 128; ++i) {
    for (int b : {0, int{'('}, int{')'}, int{'\''}, int{','}, int{' '}, int{'9'}, 0xff}) {
      std::string x = x_f4_3x2;
      x[i] = static_cast<char>(b);
      auto d = load_npy_bytes(x, y3);
      if (d) {
        INFO("byte " << i << " set to " << b);
        CHECK(d->x.rows() == 3);
        CHECK(d->x.size() == 6);
      }
    }
  }
}
