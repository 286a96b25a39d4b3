#include "protocol/digest.h"

#include <xxhash.h>

#include <cstdio>

namespace baton {

std::uint64_t xxh64(std::string_view data, std::uint64_t seed) {
  return XXH64(data.data(), data.size(), seed);
}

std::string xxh64_digest(std::string_view data) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh64:%016llx", static_cast<unsigned long long>(xxh64(data)));
  return buf;
}

}  // namespace baton
