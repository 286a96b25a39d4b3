#include "protocol/digest.h"

// The state struct is only public with XXH_STATIC_LINKING_ONLY (its layout is fixed in 0.8).
#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY
#endif
#include <xxhash.h>

namespace baton::protocol {

std::uint64_t xxh64(std::string_view data, std::uint64_t seed) {
  return XXH64(data.data(), data.size(), seed);
}

std::string xxh64_digest(std::string_view data) {
  return std::string(xxh64_prefix).append(hex16(xxh64(data)));
}

std::string hex16(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(digest_hex_len, '0');
  for (std::size_t i = 0; i < digest_hex_len; ++i) {
    s[digest_hex_len - 1 - i] = digits[v & 0xf];
    v >>= 4;
  }
  return s;
}

std::optional<std::uint64_t> parse_hex16(std::string_view s) {
  if (s.size() != digest_hex_len) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

struct xxh64_stream::state {
  XXH64_state_t s;
};

xxh64_stream::xxh64_stream(std::uint64_t seed) : state_(new state) {
  XXH64_reset(&state_->s, seed);
}

xxh64_stream::~xxh64_stream() { delete state_; }

void xxh64_stream::update(std::string_view data) {
  XXH64_update(&state_->s, data.data(), data.size());
}

std::uint64_t xxh64_stream::digest() const { return XXH64_digest(&state_->s); }

}  // namespace baton::protocol
