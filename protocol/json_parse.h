// The guarded JSON parse: how every document from outside (job specs, daemon settings, API
// bodies, worker lines, checkpoint headers and manifests) becomes a DOM. nlohmann has no nesting
// limit and keeps an unspecified one of two duplicate keys, so a hostile document could exhaust
// the stack or hide a second value. scan_json runs a validating SAX pass first (size, depth,
// syntax, duplicates), building nothing, and says what is wrong and where (a byte offset, which
// line_column turns into line and column); only a clean document is then built. The parser is
// iterative, so a hostile "[[[[..." costs one counter, not a stack frame per level.
//
// Callers word the faults themselves (a job spec and an API answer say different things about
// the same duplicate key); parse_json_guarded is the short wording most callers share.
#pragma once

#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace baton::protocol {

// nlohmann's parse errors quote the raw bytes last read ("last read: '...'"), which in hostile
// input are invalid UTF-8 or control characters. Error texts are stored in JSON (records, API
// answers, logs) whose strict dump() throws on invalid UTF-8, so such bytes are shown as \xNN.
std::string printable(std::string_view s);

struct json_limits {
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
  std::size_t max_depth = 64;
  // Stop at the first duplicate key, or read on and list every one (the job spec's report).
  bool collect_duplicates = false;
};

struct json_fault {
  enum class kind { too_large, too_deep, syntax, duplicate_key };
  kind what = kind::syntax;
  // too_deep: the bracket that opens level max_depth + 1; syntax: the offending byte (0-based);
  // too_large: the document's size.
  std::size_t offset = 0;
  std::size_t limit = 0;  // too_large: max_bytes; too_deep: max_depth
  std::string reason;     // syntax: nlohmann's explanation, printable, without tag or location
  std::string message;    // syntax: nlohmann's text, printable, without the "[json...] " tag
  std::string key;        // duplicate_key: the key
  std::string path;       // duplicate_key: JSON path of the duplicate ("a.b[2].c")
};

struct json_scan {
  // What stopped the scan (size, depth, syntax, or the first duplicate unless collecting).
  std::optional<json_fault> fault;
  // With collect_duplicates: every duplicate key, in document order.
  std::vector<json_fault> duplicates;

  bool clean() const { return !fault && duplicates.empty(); }
};

json_scan scan_json(std::string_view text, const json_limits& limits);

// scan_json and the build in one pass over the text, for nlohmann::json (the hot path: every
// worker line goes through it). `out` is the document when the scan is clean, else null.
json_scan scan_and_build_json(std::string_view text, const json_limits& limits,
                              nlohmann::json& out);

// "line L, column C (byte N)" for a 0-based byte offset, counting bytes, not characters.
std::string line_column(std::string_view text, std::size_t offset);

// Parses a document scan_json found clean; its recursion is bounded by the scan's depth limit.
template <class Json = nlohmann::json>
Json build_scanned_json(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// The short wording: "duplicate key \"k\"", "nesting deeper than N levels", or "invalid JSON at
// byte N: parse error at line L, column C: ..." with N counted from `base_offset` (the position
// of `text` within its file).
std::string short_message(const json_fault& f, std::size_t base_offset = 0);

template <class Json = nlohmann::json>
result<Json> parse_json_guarded(std::string_view text, std::size_t max_depth,
                                std::size_t base_offset = 0) {
  if constexpr (std::is_same_v<Json, nlohmann::json>) {
    Json out;
    const json_scan scan = scan_and_build_json(text, json_limits{.max_depth = max_depth}, out);
    if (scan.fault) return make_error(short_message(*scan.fault, base_offset));
    return out;
  } else {
    const json_scan scan = scan_json(text, json_limits{.max_depth = max_depth});
    if (scan.fault) return make_error(short_message(*scan.fault, base_offset));
    return build_scanned_json<Json>(text);
  }
}

}  // namespace baton::protocol
