// Content digests used to detect corruption of files baton writes (checkpoints, state files).
// xxh64 from Debian's libxxhash: fast enough to hash a 50 MB checkpoint in a few milliseconds;
// not cryptographic (it guards against disks and crashes, not attackers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

std::uint64_t xxh64(std::string_view data, std::uint64_t seed = 0);

// "xxh64:" followed by 16 lowercase hex digits.
std::string xxh64_digest(std::string_view data);

}  // namespace baton
