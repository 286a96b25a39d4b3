#include "supervisor/control_token.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "os/random_bytes.h"

namespace baton::supervisor {

result<std::string> make_control_token() {
  std::array<std::uint8_t, control_token_bytes> raw{};
  if (auto s = os::fill_random(raw); !s) return with_context("control token", s.error());
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(control_token_chars);
  for (const auto b : raw) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

bool is_valid_control_token(std::string_view token) {
  if (token.size() != control_token_chars) return false;
  for (const char c : token) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool tokens_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited and folded in, so the time says nothing about
  // the position of the first difference; volatile keeps the compiler from exiting early.
  const std::size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

std::optional<api_error> check_bearer(const std::optional<std::string_view>& authorization,
                                      std::string_view expected) {
  constexpr std::string_view hint =
      " (the token is in the daemon's control endpoint file, readable by Administrators, SYSTEM "
      "and the daemon's account or group)";
  if (!authorization) {
    return api_error(401, "missing Authorization header: send 'Authorization: Bearer <token>'" +
                              std::string(hint));
  }
  std::string_view v = *authorization;
  // RFC 9110: the scheme is case-insensitive; one or more spaces before the credentials.
  constexpr std::string_view scheme = "bearer";
  bool is_bearer = v.size() > scheme.size() && (v[scheme.size()] == ' ');
  for (std::size_t i = 0; is_bearer && i < scheme.size(); ++i) {
    const char c = v[i] >= 'A' && v[i] <= 'Z' ? static_cast<char>(v[i] - 'A' + 'a') : v[i];
    is_bearer = c == scheme[i];
  }
  if (!is_bearer) {
    return api_error(401, "Authorization header is not a Bearer credential" + std::string(hint));
  }
  v.remove_prefix(scheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (!tokens_equal(v, expected)) {
    return api_error(401, "wrong control token" + std::string(hint));
  }
  return std::nullopt;
}

}  // namespace baton::supervisor
