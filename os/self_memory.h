// The running process's own resident memory, for the daemon's figures (its /metrics). Apart from
// os/system.h so that only its few users rebuild when it changes.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace baton::os {

// Resident bytes of this process alone, not its children (Linux: /proc/self/statm; Windows: the
// working set). An error where the OS will not say.
result<std::uint64_t> own_rss_bytes();

}  // namespace baton::os
