// The bearer token that guards the control API where the transport itself cannot say who is
// calling (loopback TCP on Windows): 256 random bits from the OS, written by the daemon into the
// endpoint file only authorised accounts can read, and sent back by clients as
// `Authorization: Bearer <64 hex digits>`. Checking is pure and constant-time in the token's
// contents; the daemon owns the expected token, the session calls check_bearer on every request.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "supervisor/control_api.h"

namespace baton::supervisor {

inline constexpr std::size_t control_token_bytes = 32;                       // 256 bits
inline constexpr std::size_t control_token_chars = 2 * control_token_bytes;  // lowercase hex

// A fresh token from os::fill_random, as 64 lowercase hex digits.
result<std::string> make_control_token();

// True when `token` is exactly 64 lowercase hex digits.
bool is_valid_control_token(std::string_view token);

// Equal length and bytes, in time that depends only on the lengths (never on where they differ).
bool tokens_equal(std::string_view a, std::string_view b);

// Checks one request's Authorization header (nullopt: the header is absent) against `expected`.
// nullopt when it matches; else a 401 naming what was wrong (missing, not a Bearer credential,
// wrong token), never echoing what the client sent.
std::optional<api_error> check_bearer(const std::optional<std::string_view>& authorization,
                                      std::string_view expected);

}  // namespace baton::supervisor
