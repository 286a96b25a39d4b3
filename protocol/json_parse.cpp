#include "protocol/json_parse.h"

#include <algorithm>
#include <set>

#include "protocol/field_checker.h"

namespace baton::protocol {

namespace {

using json = nlohmann::json;

// Byte offset of the first bracket that opens level max_depth + 1, skipping strings. The SAX
// interface gives no positions outside errors, so this second look finds the place to point at;
// the SAX pass is what enforces the limit.
std::size_t depth_overflow_offset(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
  return text.size();
}

json_fault fault_of(json_fault::kind what, std::size_t offset, std::size_t limit) {
  json_fault f;
  f.what = what;
  f.offset = offset;
  f.limit = limit;
  return f;
}

class guard_sax {
 public:
  explicit guard_sax(const json_limits& limits) : limits_(limits) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const std::string&) { return value(); }
  bool string(std::string&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    auto& f = frames_.back();
    f.key = k;
    if (f.keys.insert(k).second) return true;
    json_fault d;
    d.what = json_fault::kind::duplicate_key;
    d.key = k;
    d.path = path();
    if (!limits_.collect_duplicates) {
      scan_.fault = std::move(d);
      return false;
    }
    scan_.duplicates.push_back(std::move(d));
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    json_fault f;
    f.what = json_fault::kind::syntax;
    // nlohmann reports the count of bytes read; the offending byte is the last one read.
    f.offset = position > 0 ? position - 1 : 0;
    // what() reads "[json.exception.parse_error.101] parse error at line 1, column 5: <reason>".
    std::string what = e.what();
    if (const auto p = what.find("] "); p != std::string::npos && what.rfind("[json", 0) == 0) {
      what.erase(0, p + 2);
    }
    f.message = printable(what);
    std::string reason = what;
    if (const auto at = reason.find("column "); at != std::string::npos) {
      if (const auto colon = reason.find(": ", at); colon != std::string::npos) {
        reason = reason.substr(colon + 2);
      }
    }
    f.reason = printable(reason);
    scan_.fault = std::move(f);
    return false;
  }

  json_scan take() { return std::move(scan_); }
  bool too_deep() const { return too_deep_; }

 private:
  struct frame {
    bool array = false;
    std::size_t next_index = 0;  // arrays: index of the next element
    std::string key;             // objects: the key being read
    std::set<std::string> keys;
  };

  // Marks the start of a value, so array frames know which element they are on.
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().next_index;
    return true;
  }
  bool open(bool array) {
    value();
    if (frames_.size() >= limits_.max_depth) {
      too_deep_ = true;
      return false;  // stops the parser; nothing deeper is read
    }
    frames_.push_back(frame{array, 0, {}, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  std::string path() const {
    std::string out;
    for (const auto& f : frames_) {
      out = f.array ? index_path(out, f.next_index - 1) : child_path(out, f.key);
    }
    return out;
  }

  json_limits limits_;
  std::vector<frame> frames_;
  bool too_deep_ = false;
  json_scan scan_;
};

// guard_sax's checks while nlohmann's own DOM builder builds the document: one pass over the
// text instead of a scan and then a parse. The guard sees every event first and stops the
// parse at its first fault, before the builder takes the value.
class building_sax {
 public:
  building_sax(guard_sax& guard, json& out)
      : guard_(guard), dom_(out, /*allow_exceptions=*/false) {}

  bool null() { return guard_.null() && dom_.null(); }
  bool boolean(bool v) { return guard_.boolean(v) && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    return guard_.number_integer(v) && dom_.number_integer(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    return guard_.number_unsigned(v) && dom_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const std::string& s) {
    return guard_.number_float(v, s) && dom_.number_float(v, s);
  }
  bool string(std::string& v) { return guard_.string(v) && dom_.string(v); }
  bool binary(json::binary_t& v) { return guard_.binary(v) && dom_.binary(v); }
  bool start_object(std::size_t n) { return guard_.start_object(n) && dom_.start_object(n); }
  bool start_array(std::size_t n) { return guard_.start_array(n) && dom_.start_array(n); }
  bool end_object() { return guard_.end_object() && dom_.end_object(); }
  bool end_array() { return guard_.end_array() && dom_.end_array(); }
  bool key(std::string& k) { return guard_.key(k) && dom_.key(k); }
  bool parse_error(std::size_t position, const std::string& last,
                   const nlohmann::detail::exception& e) {
    return guard_.parse_error(position, last, e);
  }

 private:
  guard_sax& guard_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
};

json_scan finish_scan(std::string_view text, const json_limits& limits, guard_sax& sax, bool ok) {
  const bool too_deep = sax.too_deep();
  json_scan scan = sax.take();
  if (too_deep) {
    scan.fault = fault_of(json_fault::kind::too_deep, depth_overflow_offset(text, limits.max_depth),
                          limits.max_depth);
  } else if (!ok && !scan.fault) {
    // sax_parse reports every failure through parse_error; this is a guard, not a path.
    scan.fault = fault_of(json_fault::kind::syntax, 0, 0);
    scan.fault->reason = "invalid JSON";
  }
  return scan;
}

}  // namespace

std::string printable(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

json_scan scan_json(std::string_view text, const json_limits& limits) {
  if (text.size() > limits.max_bytes) {
    json_scan scan;
    scan.fault = fault_of(json_fault::kind::too_large, text.size(), limits.max_bytes);
    return scan;
  }
  guard_sax sax(limits);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  return finish_scan(text, limits, sax, ok);
}

json_scan scan_and_build_json(std::string_view text, const json_limits& limits,
                              nlohmann::json& out) {
  out = nullptr;
  if (text.size() > limits.max_bytes) {
    json_scan scan;
    scan.fault = fault_of(json_fault::kind::too_large, text.size(), limits.max_bytes);
    return scan;
  }
  guard_sax guard(limits);
  building_sax sax(guard, out);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  json_scan scan = finish_scan(text, limits, guard, ok);
  // A document cut short by a fault is half built: nothing of it is handed out.
  if (!scan.clean()) out = nullptr;
  return scan;
}

std::string line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + " (byte " +
         std::to_string(offset) + ")";
}

std::string short_message(const json_fault& f, std::size_t base_offset) {
  switch (f.what) {
    case json_fault::kind::too_large:
      return "document of " + std::to_string(f.offset) + " bytes is larger than " +
             std::to_string(f.limit) + " bytes";
    case json_fault::kind::too_deep:
      return "nesting deeper than " + std::to_string(f.limit) + " levels";
    case json_fault::kind::duplicate_key:
      return "duplicate key \"" + f.key + "\"";
    case json_fault::kind::syntax:
      if (f.message.empty()) return "invalid JSON";
      return "invalid JSON at byte " + std::to_string(base_offset + f.offset) + ": " + f.message;
  }
  return "invalid JSON";
}

}  // namespace baton::protocol
