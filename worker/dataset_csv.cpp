// The CSV source: RFC 4180-ish records, a header or none, the label column by name or index,
// optional z-scoring of the feature columns. Errors name the file, the 1-based line and column.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "os/env.h"
#include "worker/dataset_sources.h"

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

}  // namespace

result<dataset> load_csv(os::env& e, const protocol::csv_data& spec, loss_kind loss,
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

}  // namespace baton::worker
