// worker/dataset_csv.cpp: CSV records, headers, label columns, standardisation and every error.
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

TEST_CASE("csv with a header and a label named", "[unit][dataset][csv]") {
  auto d = load_csv_text("a,label,b\n1,0,2.5\n-3,1,4e2\n", csv("/d/data.csv", "label"),
                         loss_kind::binary_crossentropy);
  REQUIRE(d);
  row_matrix<float> x(2, 2);
  x << 1, 2.5f, -3, 400;
  CHECK(d->x == x);
  row_matrix<float> y(2, 1);
  y << 0, 1;
  CHECK(d->y == y);
}

TEST_CASE("csv without a header, label by index and from the end", "[unit][dataset][csv]") {
  const std::string text = "1,2,3\n4,5,6\n";
  auto last = load_csv_text(text, csv("/d/data.csv", std::int64_t{-1}, false));
  REQUIRE(last);
  CHECK(last->x(1, 0) == 4);
  CHECK(last->x(1, 1) == 5);
  CHECK(last->y(1, 0) == 6);
  auto first = load_csv_text(text, csv("/d/data.csv", std::int64_t{0}, false));
  REQUIRE(first);
  CHECK(first->y(0, 0) == 1);
  CHECK(first->x(0, 0) == 2);
  auto middle = load_csv_text(text, csv("/d/data.csv", std::int64_t{-2}, false));
  REQUIRE(middle);
  CHECK(middle->y(1, 0) == 5);
  CHECK(middle->x(1, 1) == 6);
}

TEST_CASE("csv quotes, CRLF, spaces, BOM and blank lines", "[unit][dataset][csv]") {
  const std::string text =
      "\xEF\xBB\xBF \"height, cm\" , \"say \"\"hi\"\"\",y\r\n"
      " 1.5 , \"2\" ,+1\r\n"
      "\r\n"
      "3,\t4 ,0\r\n"
      "\r\n";
  auto d = load_csv_text(text, csv("/d/data.csv", "y"), loss_kind::binary_crossentropy);
  REQUIRE(d);
  REQUIRE(d->x.rows() == 2);
  CHECK(d->x(0, 0) == 1.5f);
  CHECK(d->x(0, 1) == 2.0f);
  CHECK(d->y(0, 0) == 1.0f);
  CHECK(d->x(1, 1) == 4.0f);
  // The quoted names were unescaped: a bad value names them.
  auto bad = load_csv_text("\"height, cm\",\"say \"\"hi\"\"\",y\n1,x,0\n", csv("/d/data.csv", "y"));
  CHECK(error_of(bad) == "/d/data.csv:2: column 2 (\"say \"hi\"\"): expected a number, got \"x\"");
}

TEST_CASE("csv standardize gives z-scores and leaves constant columns at 0",
          "[unit][dataset][csv]") {
  auto d = load_csv_text("a,c,y\n1,0.1,0\n2,0.1,1\n3,0.1,0\n6,0.1,1\n",
                         csv("/d/data.csv", "y", true, true));
  REQUIRE(d);
  const double mean = 3.0;
  const double sd = std::sqrt((4.0 + 1.0 + 0.0 + 9.0) / 4.0);
  const double raw[] = {1, 2, 3, 6};
  for (int r = 0; r < 4; ++r) {
    CHECK(d->x(r, 0) == Approx((raw[r] - mean) / sd));
    CHECK(d->x(r, 1) == 0.0f);
  }
  CHECK(d->x.col(0).cast<double>().sum() == Approx(0).margin(1e-6));
}

TEST_CASE("csv class labels become one-hot for categorical_crossentropy", "[unit][dataset][csv]") {
  auto d = load_csv_text("f,cls\n0.5,2\n0.1,0\n", csv("/d/data.csv", "cls"),
                         loss_kind::categorical_crossentropy, 3);
  REQUIRE(d);
  row_matrix<float> y(2, 3);
  y << 0, 0, 1, 1, 0, 0;
  CHECK(d->y == y);
  CHECK(error_of(load_csv_text("f,cls\n0.5,2\n0.1,3\n", csv("/d/data.csv", "cls"),
                               loss_kind::categorical_crossentropy, 3)) ==
        "/d/data.csv:3: column 2 (\"cls\"): class label 3 is outside [0, 3) for a model with 3 "
        "output units");
  CHECK(error_of(load_csv_text("f,cls\n0.5,1.5\n", csv("/d/data.csv", "cls"),
                               loss_kind::categorical_crossentropy, 3)) ==
        "/d/data.csv:2: column 2 (\"cls\"): class label 1.5 is not an integer");
}

TEST_CASE("csv error messages name the file and line", "[unit][dataset][csv]") {
  const auto spec = csv("/d/data.csv", "label");
  SECTION("non-numeric value") {
    std::string text = "id,age,label\n";
    for (int i = 0; i < 15; ++i) text += "1,2,0\n";
    text += "1,abc,0\n";
    CHECK(error_of(load_csv_text(text, csv("/d/data.csv", "label"))) ==
          "/d/data.csv:17: column 2 (\"age\"): expected a number, got \"abc\"");
  }
  SECTION("empty field") {
    CHECK(error_of(load_csv_text("1,,0\n", csv("/d/data.csv", std::int64_t{-1}, false))) ==
          "/d/data.csv:1: column 2: expected a number, got \"\"");
  }
  SECTION("out of double range") {
    CHECK_THAT(
        error_of(load_csv_text("a,label\n1e999,0\n", spec)),
        Catch::Contains("/d/data.csv:2: column 1 (\"a\"): number \"1e999\" is out of range"));
  }
  SECTION("outside float32 range") {
    CHECK_THAT(error_of(load_csv_text("a,label\n1e39,0\n", spec)),
               Catch::Contains("/d/data.csv:2: column 1 (\"a\"): value 1e+39 is outside the "
                               "float32 range"));
  }
  SECTION("wrong number of columns") {
    CHECK(error_of(load_csv_text("a,b,label\n1,2,0\n1,2\n", spec)) ==
          "/d/data.csv:3: expected 3 columns (as in the header), got 2");
  }
  SECTION("empty file") {
    CHECK(error_of(load_csv_text("", spec)) == "/d/data.csv: file is empty");
    CHECK(error_of(load_csv_text("\n  \r\n", spec)) == "/d/data.csv: file is empty");
  }
  SECTION("header only") {
    CHECK(error_of(load_csv_text("a,label\n\n", spec)) ==
          "/d/data.csv: has a header line but no data rows");
  }
  SECTION("unknown label name lists the columns") {
    CHECK(error_of(load_csv_text("a,b,target\n1,2,3\n", spec)) ==
          "/d/data.csv: no column named \"label\"; the columns are: \"a\", \"b\", \"target\"");
  }
  SECTION("label name without a header") {
    CHECK_THAT(error_of(load_csv_text("1,2\n", csv("/d/data.csv", "label", false))),
               Catch::Contains("label_column \"label\" is a column name, but header is false"));
  }
  SECTION("label index out of range") {
    CHECK(error_of(load_csv_text("1,2,3\n", csv("/d/data.csv", std::int64_t{3}, false))) ==
          "/d/data.csv: label_column 3 is out of range for 3 columns (valid: -3 to 2)");
    CHECK_THAT(error_of(load_csv_text("1,2,3\n", csv("/d/data.csv", std::int64_t{-4}, false))),
               Catch::Contains("label_column -4 is out of range"));
  }
  SECTION("only one column") {
    CHECK_THAT(error_of(load_csv_text("label\n1\n", spec)),
               Catch::Contains("/d/data.csv:1: needs at least 2 columns"));
  }
  SECTION("non-finite feature") {
    CHECK(error_of(load_csv_text("a,label\n1,0\nnan,1\n", spec)) ==
          "/d/data.csv:3: column 1 (\"a\"): value is nan; features must be finite");
    CHECK_THAT(error_of(load_csv_text("a,label\ninf,1\n", spec)), Catch::Contains("value is inf"));
  }
  SECTION("non-finite label") {
    CHECK(error_of(load_csv_text("a,label\n1,nan\n", spec)) ==
          "/d/data.csv:2: column 2 (\"label\"): label is nan; labels must be finite");
  }
  SECTION("binary label not 0 or 1") {
    CHECK(error_of(load_csv_text("a,label\n1,0\n2,2\n", spec, loss_kind::binary_crossentropy)) ==
          "/d/data.csv:3: column 2 (\"label\"): binary_crossentropy labels must be 0 or 1, got 2");
  }
  SECTION("unterminated quote names the line it opened on") {
    CHECK(error_of(load_csv_text("a,label\n1,\"0\n2,1\n", spec)) ==
          "/d/data.csv:2: quoted field is never closed");
  }
  SECTION("text after a closing quote") {
    CHECK(error_of(load_csv_text("a,label\n\"1\"x,0\n", spec)) ==
          "/d/data.csv:2: unexpected character 'x' after a closing quote");
  }
  SECTION("duplicate label name") {
    CHECK_THAT(error_of(load_csv_text("label,label\n1,0\n", spec)),
               Catch::Contains("matches more than one column (1 and 2)"));
  }
  SECTION("missing file") {
    map_env e;
    CHECK_THAT(error_of(load_dataset(e, spec, loss_kind::mse, 1)), Catch::Contains("/d/data.csv"));
  }
}

TEST_CASE("csv skips blank lines between rows and mse takes a single column",
          "[unit][dataset][csv]") {
  auto d = load_csv_text("x,y\n1,0.25\n\n   \n2,-7.5", csv("/d/data.csv", "y"));
  REQUIRE(d);
  REQUIRE(d->x.rows() == 2);
  CHECK(d->y(1, 0) == -7.5f);
}
