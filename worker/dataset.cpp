#include "worker/dataset.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "os/env.h"
#include "worker/random.h"

// Loaded data (standardised columns) should be the same bits on every platform, so a*b+c must not
// be fused into one FMA on some targets and rounded twice on others (GCC contracts in ISO mode).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace baton::worker {

namespace {

using protocol::loss_kind;

// Shortest round-trip form, locale-independent: "2.5", "nan", "1e+39".
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

// ---------------------------------------------------------------------------------------------
// Labels: one place that turns raw label values into the y the loss expects.

struct raw_labels {
  std::vector<double> values;  // rows x cols, row-major
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

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

// Names where row `r` of the labels came from, e.g. "data.csv:17: column 5 ("label")".
using row_namer = std::function<std::string(std::int64_t)>;

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

status check_units(std::int64_t units) {
  if (units <= 0) {
    return make_error("dataset: the model must have at least one output unit, got " +
                      std::to_string(units));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// CSV

// Splits RFC 4180-ish records: fields separated by commas, optionally double-quoted ("" is a
// quote inside a quoted field, which may span lines), spaces around fields ignored, \n, \r\n or
// \r line ends. Line numbers are 1-based and count physical lines.
class csv_reader {
 public:
  csv_reader(std::string_view text, std::string name) : text_(text), name_(std::move(name)) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte-order mark (Excel)
  }

  // Reads the next record; false at the end of the input. `blank` marks an empty line.
  result<bool> next(std::vector<std::string>& fields, std::int64_t& record_line, bool& blank) {
    fields.clear();
    if (pos_ >= text_.size()) return false;
    record_line = line_;
    bool any_quoted = false;
    const std::size_t n = text_.size();
    for (;;) {
      std::string field;
      skip_spaces();
      if (pos_ < n && text_[pos_] == '"') {
        any_quoted = true;
        const std::int64_t quote_line = line_;
        ++pos_;
        for (;;) {
          if (pos_ >= n) {
            return make_error(name_ + ":" + std::to_string(quote_line) +
                              ": quoted field is never closed");
          }
          const char c = text_[pos_++];
          if (c == '"') {
            if (pos_ < n && text_[pos_] == '"') {
              field += '"';
              ++pos_;
            } else {
              break;
            }
          } else {
            if (c == '\n') ++line_;
            field += c;
          }
        }
        skip_spaces();
        if (pos_ < n && !is_field_end(text_[pos_])) {
          return make_error(name_ + ":" + std::to_string(line_) + ": unexpected character '" +
                            std::string(1, text_[pos_]) + "' after a closing quote");
        }
      } else {
        const std::size_t start = pos_;
        while (pos_ < n && !is_field_end(text_[pos_])) ++pos_;
        std::string_view raw = text_.substr(start, pos_ - start);
        while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\t')) raw.remove_suffix(1);
        field.assign(raw);
      }
      fields.push_back(std::move(field));
      if (pos_ >= n) break;
      const char c = text_[pos_++];
      if (c == ',') continue;
      if (c == '\r' && pos_ < n && text_[pos_] == '\n') ++pos_;
      ++line_;
      break;
    }
    blank = !any_quoted && fields.size() == 1 && fields[0].empty();
    return true;
  }

 private:
  static bool is_field_end(char c) { return c == ',' || c == '\n' || c == '\r'; }
  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  std::string_view text_;
  std::string name_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 1;
};

enum class number_error { none, not_a_number, out_of_range };

number_error parse_number(std::string_view s, double& out) {
  // from_chars takes no leading '+', which spreadsheets do write.
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  if (s.empty()) return number_error::not_a_number;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  if (ec == std::errc::result_out_of_range) return number_error::out_of_range;
  if (ec != std::errc{} || p != end) return number_error::not_a_number;
  return number_error::none;
}

result<dataset> load_csv(env& e, const protocol::csv_data& spec, loss_kind loss,
                         std::int64_t units) {
  const std::string name = spec.path.string();
  auto text = e.read_file(spec.path);
  if (!text) return text.error();

  csv_reader reader(*text, name);
  std::vector<std::string> fields;
  std::int64_t line = 0;
  bool blank = false;
  auto next_nonblank = [&]() -> result<bool> {
    for (;;) {
      auto more = reader.next(fields, line, blank);
      if (!more || !*more || !blank) return more;
    }
  };

  auto first = next_nonblank();
  if (!first) return first.error();
  if (!*first) return make_error(name + ": file is empty");

  std::vector<std::string> names;
  const std::size_t columns = fields.size();
  if (columns < 2) {
    return make_error(name + ":" + std::to_string(line) + ": needs at least 2 columns (features " +
                      "and a label), found " + std::to_string(columns));
  }
  if (spec.header) {
    names = fields;
    auto more = next_nonblank();
    if (!more) return more.error();
    if (!*more) return make_error(name + ": has a header line but no data rows");
  }
  bool have_row = true;  // `fields` holds a data row not yet consumed

  // Resolve the label column before parsing so a wrong name fails fast.
  std::size_t label = 0;
  if (const auto* label_name = std::get_if<std::string>(&spec.label_column)) {
    if (!spec.header) {
      return make_error(name + ": label_column " + in_quotes(*label_name) +
                        " is a column name, but header is false; give a 0-based index instead");
    }
    std::optional<std::size_t> found;
    for (std::size_t c = 0; c < names.size(); ++c) {
      if (names[c] != *label_name) continue;
      if (found) {
        return make_error(name + ": label_column " + in_quotes(*label_name) +
                          " matches more than one column (" + std::to_string(*found + 1) + " and " +
                          std::to_string(c + 1) + ")");
      }
      found = c;
    }
    if (!found) {
      std::string available;
      for (const auto& n : names) available += (available.empty() ? "" : ", ") + in_quotes(n);
      return make_error(name + ": no column named " + in_quotes(*label_name) +
                        "; the columns are: " + available);
    }
    label = *found;
  } else {
    const std::int64_t index = std::get<std::int64_t>(spec.label_column);
    const auto ncols = static_cast<std::int64_t>(columns);
    const std::int64_t resolved = index < 0 ? index + ncols : index;
    if (resolved < 0 || resolved >= ncols) {
      return make_error(name + ": label_column " + std::to_string(index) + " is out of range for " +
                        std::to_string(ncols) + " columns (valid: " + std::to_string(-ncols) +
                        " to " + std::to_string(ncols - 1) + ")");
    }
    label = static_cast<std::size_t>(resolved);
  }

  auto column_desc = [&](std::size_t c) {
    std::string s = "column " + std::to_string(c + 1);
    if (!names.empty()) s += " (" + in_quotes(names[c]) + ")";
    return s;
  };

  const std::size_t features = columns - 1;
  std::vector<double> xs;
  raw_labels labels;
  labels.cols = 1;
  std::vector<std::int64_t> row_lines;
  while (have_row) {
    const std::string where = name + ":" + std::to_string(line);
    if (fields.size() != columns) {
      return make_error(where + ": expected " + std::to_string(columns) + " columns" +
                        (spec.header ? " (as in the header)" : " (as in the first row)") +
                        ", got " + std::to_string(fields.size()));
    }
    for (std::size_t c = 0; c < columns; ++c) {
      double v = 0;
      switch (parse_number(fields[c], v)) {
        case number_error::none:
          break;
        case number_error::not_a_number:
          return make_error(where + ": " + column_desc(c) + ": expected a number, got " +
                            in_quotes(fields[c]));
        case number_error::out_of_range:
          return make_error(where + ": " + column_desc(c) + ": number " + in_quotes(fields[c]) +
                            " is out of range");
      }
      if (c == label) {
        labels.values.push_back(v);
      } else {
        if (!std::isfinite(v)) {
          return make_error(where + ": " + column_desc(c) + ": value is " + format_number(v) +
                            "; features must be finite");
        }
        xs.push_back(v);
      }
    }
    row_lines.push_back(line);
    auto more = next_nonblank();
    if (!more) return more.error();
    have_row = *more;
  }

  const auto rows = static_cast<std::int64_t>(row_lines.size());
  labels.rows = rows;
  auto feature_column = [&](std::size_t f) { return f < label ? f : f + 1; };

  if (spec.standardize) {
    // z-score per column over all rows (population std, as sklearn's StandardScaler). A
    // constant column is detected exactly (min == max) so rounding in the mean cannot turn it
    // into noise of +-1.
    for (std::size_t f = 0; f < features; ++f) {
      double lo = xs[f], hi = xs[f], sum = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const double v = xs[static_cast<std::size_t>(r) * features + f];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
      }
      const double mean = sum / static_cast<double>(rows);
      double sq = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const double d = xs[static_cast<std::size_t>(r) * features + f] - mean;
        sq += d * d;
      }
      const double sd = std::sqrt(sq / static_cast<double>(rows));
      for (std::int64_t r = 0; r < rows; ++r) {
        double& v = xs[static_cast<std::size_t>(r) * features + f];
        v = (lo == hi || !(sd > 0)) ? 0.0 : (v - mean) / sd;
      }
    }
  }

  dataset out;
  out.x.resize(rows, static_cast<Eigen::Index>(features));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::size_t f = 0; f < features; ++f) {
      const double v = xs[static_cast<std::size_t>(r) * features + f];
      const float x = static_cast<float>(v);
      if (!std::isfinite(x)) {
        return make_error(name + ":" + std::to_string(row_lines[static_cast<std::size_t>(r)]) +
                          ": " + column_desc(feature_column(f)) + ": value " + format_number(v) +
                          " is outside the float32 range");
      }
      out.x(r, static_cast<Eigen::Index>(f)) = x;
    }
  }
  auto y = shape_labels(labels, loss, units, name, [&](std::int64_t r) {
    return name + ":" + std::to_string(row_lines[static_cast<std::size_t>(r)]) + ": " +
           column_desc(label);
  });
  if (!y) return y.error();
  out.y = std::move(*y);
  return out;
}

// ---------------------------------------------------------------------------------------------
// .npy (format spec: numpy/lib/format.py, NEP 1)

// The subset of Python literals an .npy header dict uses.
struct py_value {
  enum class kind { string, boolean, integer, none, tuple, list } k = kind::none;
  std::string str;
  bool b = false;
  std::int64_t i = 0;
  std::vector<py_value> items;
  std::size_t offset = 0;  // byte offset in the file
};

class py_parser {
 public:
  py_parser(std::string_view text, std::size_t base, std::string name)
      : t_(text), base_(base), name_(std::move(name)) {}

  result<std::vector<std::pair<std::string, py_value>>> parse_dict() {
    std::vector<std::pair<std::string, py_value>> out;
    skip_ws();
    if (!eat('{')) return fail("expected '{'");
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      const std::size_t key_at = pos_;
      auto key = parse_value(0);
      if (!key) return key.error();
      if (key->k != py_value::kind::string) return fail_at(key_at, "expected a string key");
      for (const auto& [k, v] : out) {
        if (k == key->str) return fail_at(key_at, "duplicate key '" + k + "'");
      }
      skip_ws();
      if (!eat(':')) return fail("expected ':'");
      auto value = parse_value(0);
      if (!value) return value.error();
      out.emplace_back(key->str, std::move(*value));
      skip_ws();
      if (eat('}')) break;
      if (!eat(',')) return fail("expected ',' or '}'");
    }
    skip_ws();
    if (pos_ != t_.size()) return fail("unexpected text after the header dict");
    return out;
  }

 private:
  result<py_value> parse_value(int depth) {
    if (depth > 16) return fail("nested too deeply");
    skip_ws();
    py_value v;
    v.offset = base_ + pos_;
    if (pos_ >= t_.size()) return fail("unexpected end of header");
    const char c = t_[pos_];
    if (c == '\'' || c == '"') {
      ++pos_;
      v.k = py_value::kind::string;
      for (;;) {
        if (pos_ >= t_.size()) return fail_at(v.offset - base_, "string is never closed");
        char d = t_[pos_++];
        if (d == c) break;
        if (d == '\\' && pos_ < t_.size()) d = t_[pos_++];
        v.str += d;
      }
      return v;
    }
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      v.k = c == '(' ? py_value::kind::tuple : py_value::kind::list;
      ++pos_;
      for (;;) {
        skip_ws();
        if (eat(close)) break;
        auto item = parse_value(depth + 1);
        if (!item) return item.error();
        v.items.push_back(std::move(*item));
        skip_ws();
        if (eat(close)) break;
        if (!eat(',')) return fail(std::string("expected ',' or '") + close + "'");
      }
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const std::size_t start = pos_;
      if (c == '-') ++pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      auto [p, ec] = std::from_chars(t_.data() + start, t_.data() + pos_, v.i);
      if (ec != std::errc{} || p != t_.data() + pos_) {
        return fail_at(start, "bad integer " + in_quotes(t_.substr(start, pos_ - start)));
      }
      if (pos_ < t_.size() && (t_[pos_] == 'L' || t_[pos_] == 'l')) ++pos_;  // Python 2 long
      v.k = py_value::kind::integer;
      return v;
    }
    for (auto [word, kind, b] : {std::tuple{"True", py_value::kind::boolean, true},
                                 std::tuple{"False", py_value::kind::boolean, false},
                                 std::tuple{"None", py_value::kind::none, false}}) {
      const std::string_view w = word;
      if (t_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        v.k = kind;
        v.b = b;
        return v;
      }
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  void skip_ws() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool eat(char c) {
    if (pos_ < t_.size() && t_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  error fail(const std::string& what) const { return fail_at(pos_, what); }
  error fail_at(std::size_t local, const std::string& what) const {
    return make_error(name_ + ": malformed header at byte " + std::to_string(base_ + local) + ": " +
                      what);
  }

  std::string_view t_;
  std::size_t base_;
  std::string name_;
  std::size_t pos_ = 0;
};

struct npy_array {
  std::string descr;
  char kind = 0;  // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  int item_size = 0;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
  std::string_view data;
};

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

result<npy_array> parse_npy(std::string_view bytes, const std::string& name) {
  static constexpr std::string_view magic = "\x93NUMPY";
  if (bytes.size() < 8 || bytes.substr(0, 6) != magic) {
    return make_error(name + ": not an .npy file (bad magic at byte 0; expected \\x93NUMPY)");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return make_error(name + ": unsupported .npy format version " + std::to_string(major) + "." +
                      std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  const std::size_t len_size = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + len_size;
  if (bytes.size() < header_start) {
    return make_error(name + ": file ends inside the header length at byte 8");
  }
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_size; ++i) {
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  if (header_len > bytes.size() - header_start) {
    return make_error(name + ": header length " + std::to_string(header_len) +
                      " (at byte 8) runs past the end of the file (" +
                      std::to_string(bytes.size()) + " bytes)");
  }
  py_parser parser(bytes.substr(header_start, header_len), header_start, name);
  auto dict = parser.parse_dict();
  if (!dict) return dict.error();

  const py_value* descr = nullptr;
  const py_value* fortran = nullptr;
  const py_value* shape = nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == "descr") descr = &v;
    if (k == "fortran_order") fortran = &v;
    if (k == "shape") shape = &v;
  }
  for (auto [key, v] : {std::pair{"descr", descr}, std::pair{"fortran_order", fortran},
                        std::pair{"shape", shape}}) {
    if (!v) return make_error(name + ": malformed header: no '" + key + "' key");
  }
  auto bad = [&](const py_value& v, const std::string& what) {
    return make_error(name + ": malformed header at byte " + std::to_string(v.offset) + ": " +
                      what);
  };
  npy_array a;
  if (descr->k == py_value::kind::list) {
    return make_error(name + ": structured dtypes (a 'descr' list) are not supported");
  }
  if (descr->k != py_value::kind::string) return bad(*descr, "'descr' must be a string");
  if (fortran->k != py_value::kind::boolean) return bad(*fortran, "'fortran_order' must be bool");
  if (shape->k != py_value::kind::tuple) return bad(*shape, "'shape' must be a tuple");
  a.descr = descr->str;
  a.fortran_order = fortran->b;
  for (const auto& d : shape->items) {
    if (d.k != py_value::kind::integer || d.i < 0) {
      return bad(d, "'shape' entries must be non-negative integers");
    }
    a.shape.push_back(d.i);
  }

  // dtype: byte order, kind, item size ("<f4", "|u1", "|b1").
  const std::string& ds = a.descr;
  int size = 0;
  if (ds.size() >= 3) {
    auto [p, ec] = std::from_chars(ds.data() + 2, ds.data() + ds.size(), size);
    if (ec != std::errc{} || p != ds.data() + ds.size()) size = 0;
  }
  const char order = ds.empty() ? 0 : ds[0];
  const char kind = ds.size() < 2 ? 0 : ds[1];
  const bool known =
      (kind == 'f' && (size == 4 || size == 8)) ||
      ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
      (kind == 'b' && size == 1);
  if (!known || (order != '<' && order != '>' && order != '|' && order != '=')) {
    return make_error(name + ": unsupported dtype '" + ds +
                      "' (supported: float32/64, signed and unsigned integers, bool)");
  }
  if (size > 1 && order != '<') {
    if (order == '>') {
      return make_error(name + ": big-endian dtype '" + ds + "' is not supported; save with " +
                        "arr.astype('<" + ds.substr(1) + "')");
    }
    return make_error(name + ": dtype '" + ds + "' has no explicit byte order");
  }
  a.kind = kind;
  a.item_size = size;
  if (a.fortran_order && a.shape.size() >= 2) {
    return make_error(name + ": fortran_order is True; save with np.ascontiguousarray(arr) first");
  }

  const std::string_view data = bytes.substr(header_start + header_len);
  // A shape whose byte count overflows size_t cannot match any file.
  const std::size_t max_elems =
      std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(size);
  std::size_t elems = 1;
  bool too_big = false;
  for (std::int64_t d : a.shape) {
    const auto du = static_cast<std::size_t>(d);
    if (du != 0 && elems > max_elems / du) too_big = true;
    elems *= du;
  }
  bool empty = false;
  for (std::int64_t d : a.shape) empty = empty || d == 0;
  if (empty) too_big = false;
  const std::string offset =
      " (data starts at byte " + std::to_string(header_start + header_len) + ")";
  if (too_big || elems * static_cast<std::size_t>(size) > data.size()) {
    return make_error(name + ": data is shorter than the shape says: shape " +
                      shape_string(a.shape) + " of '" + ds + "' needs " +
                      (too_big ? std::string("more than 2^64") : std::to_string(elems * size)) +
                      " bytes, the file has " + std::to_string(data.size()) + offset);
  }
  if (elems * static_cast<std::size_t>(size) < data.size()) {
    return make_error(name + ": data is longer than the shape says: shape " +
                      shape_string(a.shape) + " of '" + ds + "' needs " +
                      std::to_string(elems * size) + " bytes, the file has " +
                      std::to_string(data.size()) + offset);
  }
  a.data = data;
  return a;
}

template <class T>
T load_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    auto* b = reinterpret_cast<unsigned char*>(&v);
    std::reverse(b, b + sizeof v);
  }
  return v;
}

// Calls fn(index, value-as-double) for every element, in file order.
template <class Fn>
void for_each_element(const npy_array& a, Fn&& fn) {
  const std::size_t n = a.data.size() / static_cast<std::size_t>(a.item_size);
  const char* p = a.data.data();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < n; ++i) fn(i, static_cast<double>(load_le<T>(p + i * sizeof(T))));
  };
  switch (a.kind) {
    case 'f':
      a.item_size == 4 ? run(float{}) : run(double{});
      break;
    case 'b':
    case 'u':
      switch (a.item_size) {
        case 1:
          run(std::uint8_t{});
          break;
        case 2:
          run(std::uint16_t{});
          break;
        case 4:
          run(std::uint32_t{});
          break;
        default:
          run(std::uint64_t{});
          break;
      }
      break;
    default:
      switch (a.item_size) {
        case 1:
          run(std::int8_t{});
          break;
        case 2:
          run(std::int16_t{});
          break;
        case 4:
          run(std::int32_t{});
          break;
        default:
          run(std::int64_t{});
          break;
      }
      break;
  }
}

result<dataset> load_npy(env& e, const protocol::npy_data& spec, loss_kind loss,
                         std::int64_t units) {
  const std::string xname = spec.features.string();
  const std::string yname = spec.labels.string();
  auto xbytes = e.read_file(spec.features);
  if (!xbytes) return xbytes.error();
  auto xa = parse_npy(*xbytes, xname);
  if (!xa) return xa.error();
  if (xa->kind != 'f') {
    return make_error(xname + ": features must be float32 ('<f4') or float64 ('<f8'), got '" +
                      xa->descr + "'");
  }
  if (xa->shape.size() != 2) {
    return make_error(xname + ": features must be a 2-D array (samples, features), got shape " +
                      shape_string(xa->shape));
  }
  const std::int64_t rows = xa->shape[0];
  const std::int64_t cols = xa->shape[1];
  if (rows == 0) return make_error(xname + ": no samples (shape " + shape_string(xa->shape) + ")");
  if (cols == 0) return make_error(xname + ": no features (shape " + shape_string(xa->shape) + ")");

  auto ybytes = e.read_file(spec.labels);
  if (!ybytes) return ybytes.error();
  auto ya = parse_npy(*ybytes, yname);
  if (!ya) return ya.error();
  if (ya->shape.size() != 1 && ya->shape.size() != 2) {
    return make_error(yname + ": labels must be a 1-D or 2-D array, got shape " +
                      shape_string(ya->shape));
  }
  if (ya->shape[0] != rows) {
    return make_error(xname + ", " + yname + ": features have " + std::to_string(rows) +
                      " rows, labels have " + std::to_string(ya->shape[0]));
  }

  dataset out;
  out.x.resize(rows, cols);
  float* x = out.x.data();
  std::optional<std::size_t> bad_index;
  double bad_value = 0;
  for_each_element(*xa, [&](std::size_t i, double v) {
    const float f = static_cast<float>(v);
    if (!std::isfinite(f) && !bad_index) {
      bad_index = i;
      bad_value = v;
    }
    x[i] = f;
  });
  if (bad_index) {
    const auto c = static_cast<std::int64_t>(*bad_index);
    return make_error(xname + ": sample " + std::to_string(c / cols) + ", feature " +
                      std::to_string(c % cols) + ": value " +
                      (std::isfinite(bad_value)
                           ? format_number(bad_value) + " is outside the float32 range"
                           : "is " + format_number(bad_value) + "; features must be finite"));
  }

  raw_labels labels;
  labels.rows = rows;
  labels.cols = ya->shape.size() == 1 ? 1 : ya->shape[1];
  labels.values.resize(static_cast<std::size_t>(rows * labels.cols));
  for_each_element(*ya, [&](std::size_t i, double v) { labels.values[i] = v; });
  auto y = shape_labels(labels, loss, units, yname,
                        [&](std::int64_t r) { return yname + ": sample " + std::to_string(r); });
  if (!y) return y.error();
  out.y = std::move(*y);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

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
  for (Eigen::Index r = 0; r < out.x.rows(); ++r) {
    double sum = 0;
    for (Eigen::Index c = 0; c < out.x.cols(); ++c) {
      const float v = static_cast<float>(gen.normal());
      out.x(r, c) = v;
      sum += static_cast<double>(v);
    }
    out.y(r, 0) = sum > 0 ? 1.0f : 0.0f;
  }
  return out;
}

result<dataset> load_dataset(env& e, const protocol::data_spec& spec, protocol::loss_kind loss,
                             std::int64_t output_units) {
  if (auto ok = check_units(output_units); !ok) return ok.error();
  if (const auto* s = std::get_if<protocol::synthetic_data>(&spec)) {
    auto d = generate_synthetic(*s);
    if (!d) return d.error();
    raw_labels labels;
    labels.rows = d->y.rows();
    labels.cols = 1;
    labels.values.assign(d->y.data(), d->y.data() + d->y.size());
    auto y = shape_labels(labels, loss, output_units, "synthetic data", [](std::int64_t r) {
      return "synthetic data: sample " + std::to_string(r);
    });
    if (!y) return y.error();
    d->y = std::move(*y);
    return d;
  }
  if (const auto* c = std::get_if<protocol::csv_data>(&spec)) {
    return load_csv(e, *c, loss, output_units);
  }
  return load_npy(e, std::get<protocol::npy_data>(spec), loss, output_units);
}

}  // namespace baton::worker
