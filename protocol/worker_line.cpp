#include "protocol/worker_line.h"

#include <algorithm>

namespace baton::protocol {

namespace {

std::string_view unless_blank(std::string_view text) {
  const bool blank = std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
  });
  return blank ? std::string_view() : text;
}

}  // namespace

worker_line read_worker_line(std::string_view line) {
  const auto brace = line.find('{');
  if (brace == std::string_view::npos) return {unless_blank(line), std::nullopt, std::nullopt};
  auto m = decode_worker_message(line.substr(brace));
  if (!m) {
    if (m.error().code == errc::protocol_violation) {
      return {unless_blank(line.substr(0, brace)), std::nullopt, m.error()};
    }
    return {unless_blank(line), std::nullopt, std::nullopt};
  }
  return {unless_blank(line.substr(0, brace)), std::move(*m), std::nullopt};
}

}  // namespace baton::protocol
