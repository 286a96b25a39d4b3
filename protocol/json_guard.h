// Parsing JSON from untrusted bytes (checkpoint headers, worker lines). nlohmann has no nesting
// limit and keeps an unspecified one of two duplicate keys, so a hostile document could exhaust
// the stack or hide a second value; parse_json_guarded runs a validating SAX pass first (depth,
// duplicates, syntax) and only then builds the document. Internal to protocol/ (the control API
// uses printable() for the same reason).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::protocol::detail {

// nlohmann's parse errors quote the raw bytes last read ("last read: '...'"), which in hostile
// input are invalid UTF-8 or control characters. Error texts are stored in JSON (records, API
// answers, logs) whose strict dump() throws on invalid UTF-8, so such bytes are shown as \xNN.
inline std::string printable(std::string_view s) {
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

template <class Json>
class json_guard_sax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  explicit json_guard_sax(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(number_integer_t) { return true; }
  bool number_unsigned(number_unsigned_t) { return true; }
  bool number_float(number_float_t, const string_t&) { return true; }
  bool string(string_t&) { return true; }
  bool binary(binary_t&) { return true; }
  bool start_object(std::size_t) { return push(true); }
  bool end_object() { return pop(); }
  bool start_array(std::size_t) { return push(false); }
  bool end_array() { return pop(); }
  bool key(string_t& k) {
    auto& f = frames_.back();
    if (!f.keys.insert(k).second) {
      error_ = "duplicate key \"" + k + "\"";
      return false;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag: the user needs the reason.
    if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json", 0) == 0) {
      what.erase(0, p + 2);
    }
    error_ = printable(what);
    error_position_ = position > 0 ? position - 1 : 0;
    return false;
  }

  const std::string& error() const { return error_; }
  std::size_t error_position() const { return error_position_; }

 private:
  struct frame {
    bool is_object;
    std::set<std::string> keys;
  };
  bool push(bool is_object) {
    if (frames_.size() >= max_depth_) {
      error_ = "nesting deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    frames_.push_back(frame{is_object, {}});
    return true;
  }
  bool pop() {
    frames_.pop_back();
    return true;
  }

  std::size_t max_depth_;
  std::vector<frame> frames_;
  std::string error_;
  std::size_t error_position_ = static_cast<std::size_t>(-1);
};

// Parses `text` as one JSON document. On failure the message says why and, for syntax errors,
// "at byte N" counted from `base_offset` (the position of `text` within its file).
template <class Json = nlohmann::json>
result<Json> parse_json_guarded(std::string_view text, std::size_t max_depth,
                                std::size_t base_offset = 0) {
  json_guard_sax<Json> sax(max_depth);
  const bool ok =
      Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                      /*strict=*/true);
  if (!ok) {
    std::string msg = sax.error().empty() ? std::string("invalid JSON") : sax.error();
    if (sax.error_position() != static_cast<std::size_t>(-1)) {
      msg =
          "invalid JSON at byte " + std::to_string(base_offset + sax.error_position()) + ": " + msg;
    }
    return make_error(msg);
  }
  // The SAX pass accepted the text, so this parse cannot fail and its recursion is bounded.
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace baton::protocol::detail
