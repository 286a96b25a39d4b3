#include "worker/dataset.h"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "os/env.h"

namespace fs = std::filesystem;
using baton::protocol::csv_data;
using baton::protocol::loss_kind;
using baton::protocol::npy_data;
using baton::protocol::synthetic_data;
using baton::worker::dataset;
using baton::worker::load_dataset;
using baton::worker::row_matrix;

namespace {

// Files live in a map: the loader must read only through env::read_file.
class map_env : public baton::env {
 public:
  std::map<std::string, std::string> files;

  baton::result<std::unique_ptr<baton::writable_file>> new_writable_file(
      const fs::path& path) override {
    return baton::make_error("map_env: cannot write " + path.string());
  }
  baton::result<std::string> read_file(const fs::path& path) override {
    auto it = files.find(path.string());
    if (it == files.end()) return baton::make_error(path.string() + ": no such file");
    return it->second;
  }
  baton::status rename_file(const fs::path&, const fs::path&) override {
    return baton::make_error("map_env: read-only");
  }
  baton::status remove_file(const fs::path&) override {
    return baton::make_error("map_env: read-only");
  }
  baton::status sync_dir(const fs::path&) override { return {}; }
  baton::status create_dirs(const fs::path&) override { return {}; }
  bool file_exists(const fs::path& path) override { return files.count(path.string()) != 0; }
  baton::result<std::vector<std::string>> list_dir(const fs::path&) override {
    return std::vector<std::string>{};
  }
};

std::string error_of(const baton::result<dataset>& r) {
  REQUIRE_FALSE(r);
  return r.error().message;
}

csv_data csv(const std::string& path, std::variant<std::int64_t, std::string> label,
             bool header = true, bool standardize = false) {
  csv_data c;
  c.path = path;
  c.label_column = std::move(label);
  c.header = header;
  c.standardize = standardize;
  return c;
}

// Loads `text` as /d/data.csv.
baton::result<dataset> load_csv_text(const std::string& text, const csv_data& spec,
                                     loss_kind loss = loss_kind::mse, std::int64_t units = 1) {
  map_env e;
  e.files[spec.path.string()] = text;
  return load_dataset(e, spec, loss, units);
}

// The bytes np.save writes: magic, version, little-endian header length, the dict padded with
// spaces to a multiple of 64 bytes and ended by '\n', then the raw data.
std::string npy_file(const std::string& descr, const std::string& shape, const std::string& data,
                     int major = 1, bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t len = dict.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + dict + data;
}

// A v1 file with `dict` as the header, unpadded.
std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

template <class T>
std::string raw_bytes(const std::vector<T>& v) {
  static_assert(std::endian::native == std::endian::little, "test data is written little-endian");
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

npy_data npy_paths() {
  npy_data n;
  n.features = "/d/x.npy";
  n.labels = "/d/y.npy";
  return n;
}

baton::result<dataset> load_npy_bytes(const std::string& x, const std::string& y,
                                      loss_kind loss = loss_kind::binary_crossentropy,
                                      std::int64_t units = 1) {
  map_env e;
  e.files["/d/x.npy"] = x;
  e.files["/d/y.npy"] = y;
  return load_dataset(e, npy_paths(), loss, units);
}

const std::string x_f4_3x2 =
    npy_file("<f4", "(3, 2)", raw_bytes(std::vector<float>{0, 1, 2, 3, 4, 5}));

}  // namespace

// --- synthetic ---------------------------------------------------------------------------------

TEST_CASE("synthetic data is deterministic per seed and differs across seeds", "[unit][dataset]") {
  map_env e;
  const synthetic_data spec{200, 30, 11};
  auto a = load_dataset(e, spec, loss_kind::binary_crossentropy, 1);
  auto b = load_dataset(e, spec, loss_kind::binary_crossentropy, 1);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->x.rows() == 200);
  REQUIRE(a->x.cols() == 30);
  REQUIRE(a->y.rows() == 200);
  REQUIRE(a->y.cols() == 1);
  CHECK(std::memcmp(a->x.data(), b->x.data(), sizeof(float) * 200 * 30) == 0);
  CHECK(a->y == b->y);
  auto c = load_dataset(e, synthetic_data{200, 30, 12}, loss_kind::binary_crossentropy, 1);
  REQUIRE(c);
  CHECK((a->x.array() != c->x.array()).count() > 200 * 30 - 5);
}

TEST_CASE("synthetic data has the reference workload's statistics", "[unit][dataset]") {
  auto d = baton::worker::generate_synthetic(synthetic_data{5000, 100, 0});
  REQUIRE(d);
  const double n = 5000.0 * 100.0;
  const double mean = d->x.cast<double>().sum() / n;
  const double var = (d->x.cast<double>().array() - mean).square().sum() / n;
  // Standard errors: mean 1/sqrt(n) = 0.0014, std about 0.001, label share 0.007.
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(std::sqrt(var) - 1.0) < 0.01);
  // Tails of a real normal: about 0.27% beyond 3 sigma.
  const double beyond3 = static_cast<double>((d->x.array().abs() > 3.0f).count()) / n;
  CHECK(beyond3 > 0.002);
  CHECK(beyond3 < 0.0035);
  const double positive = d->y.cast<double>().sum() / 5000.0;
  CHECK(std::abs(positive - 0.5) < 0.03);
  for (Eigen::Index r = 0; r < 5000; ++r) {
    const double sum = d->x.row(r).cast<double>().sum();
    REQUIRE(d->y(r, 0) == (sum > 0 ? 1.0f : 0.0f));
  }
}

TEST_CASE("synthetic generator matches golden values on every platform", "[unit][dataset]") {
  // Verified against an independent Python implementation (splitmix64 -> xoshiro256**, polar
  // method with math.log); the generator's own golden values are in random_test.cpp.
  auto d = baton::worker::generate_synthetic(synthetic_data{5000, 100, 7});
  REQUIRE(d);
  CHECK(d->x(0, 0) == 0x1.edc0d6p-1f);
  CHECK(d->x(0, 1) == -0x1.105222p+0f);
  CHECK(d->x(4999, 99) == 0x1.a682fp+0f);
}

TEST_CASE("synthetic labels become one-hot for categorical losses", "[unit][dataset]") {
  map_env e;
  auto d = load_dataset(e, synthetic_data{50, 4, 1}, loss_kind::categorical_crossentropy, 2);
  auto plain = baton::worker::generate_synthetic(synthetic_data{50, 4, 1});
  REQUIRE(d);
  REQUIRE(plain);
  REQUIRE(d->y.cols() == 2);
  for (Eigen::Index r = 0; r < 50; ++r) {
    CHECK(d->y(r, 1) == plain->y(r, 0));
    CHECK(d->y(r, 0) == 1.0f - plain->y(r, 0));
  }
}

TEST_CASE("synthetic and unit errors", "[unit][dataset]") {
  map_env e;
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{0, 4, 1}, loss_kind::mse, 1)),
             Catch::Contains("samples and features must be positive, got 0 x 4"));
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{10, 4, 1}, loss_kind::mse, 0)),
             Catch::Contains("at least one output unit"));
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{10, 4, 1}, loss_kind::mse, 3)),
             Catch::Contains("labels have 1 column but the model has 3 output units (loss mse)"));
}

// --- CSV ---------------------------------------------------------------------------------------

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

TEST_CASE("csv and npy load from real files through the default env", "[unit][dataset]") {
  auto& e = baton::env::default_env();
  const fs::path dir = fs::temp_directory_path() / "baton-dataset-test";
  fs::remove_all(dir);
  REQUIRE(e.create_dirs(dir));
  REQUIRE(baton::write_file_atomic(e, dir / "data.csv", "a,b,y\n1,2,0\n3,4,1\n"));
  auto c = load_dataset(e, csv((dir / "data.csv").string(), "y"), loss_kind::mse, 1);
  REQUIRE(c);
  CHECK(c->x(1, 1) == 4.0f);
  REQUIRE(baton::write_file_atomic(e, dir / "x.npy", x_f4_3x2));
  REQUIRE(baton::write_file_atomic(
      e, dir / "y.npy", npy_file("<f8", "(3,)", raw_bytes(std::vector<double>{0.5, 1.5, 2.5}))));
  npy_data n;
  n.features = dir / "x.npy";
  n.labels = dir / "y.npy";
  auto d = load_dataset(e, n, loss_kind::mse, 1);
  REQUIRE(d);
  CHECK(d->y(2, 0) == 2.5f);
  fs::remove_all(dir);
}

// --- npy ---------------------------------------------------------------------------------------

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

TEST_CASE("csv skips blank lines between rows and mse takes a single column",
          "[unit][dataset][csv]") {
  auto d = load_csv_text("x,y\n1,0.25\n\n   \n2,-7.5", csv("/d/data.csv", "y"));
  REQUIRE(d);
  REQUIRE(d->x.rows() == 2);
  CHECK(d->y(1, 0) == -7.5f);
}
