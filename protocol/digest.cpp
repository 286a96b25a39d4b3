#include "protocol/digest.h"

// The state struct is only public with XXH_STATIC_LINKING_ONLY (its layout is fixed in 0.8).
#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY
#endif
#include <xxhash.h>

#include <cstdio>

namespace baton::protocol {

std::uint64_t xxh64(std::string_view data, std::uint64_t seed) {
  return XXH64(data.data(), data.size(), seed);
}

std::string xxh64_digest(std::string_view data) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh64:%016llx", static_cast<unsigned long long>(xxh64(data)));
  return buf;
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
