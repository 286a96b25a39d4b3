// Cryptographically secure random bytes from the operating system, for secrets such as the
// control API's bearer token on Windows. Never a userspace PRNG: the caller owns the buffer, the
// kernel (getrandom on Linux, BCryptGenRandom on Windows) owns the entropy.
// Implementations: os/posix/random_bytes_posix.cpp, os/windows/random_bytes_windows.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace baton::os {

// Fills all of `out`, or fails with the OS's reason; never returns a partial fill.
status fill_random(std::span<std::uint8_t> out);

}  // namespace baton::os
