// The .npy source (format spec: numpy/lib/format.py, NEP 1): versions 1.0 to 3.0, float, integer
// and bool dtypes in little-endian C order. Errors name the file and the byte offset, or the
// 0-based sample index as numpy does.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "os/env.h"
#include "worker/dataset_sources.h"

namespace baton::worker {

namespace {

using protocol::loss_kind;

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

}  // namespace

result<dataset> load_npy(os::env& e, const protocol::npy_data& spec, loss_kind loss,
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

}  // namespace baton::worker
