// The running process's own resident memory, for the daemon's figures (its /metrics), and its
// waited-for children's peak, for benchmarks. Apart from
// os/system.h so that only its few users rebuild when it changes.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace baton::os {

// Resident bytes of this process alone, not its children (Linux: /proc/self/statm; Windows: the
// working set). An error where the OS will not say.
result<std::uint64_t> own_rss_bytes();

// The peak resident memory of the largest child this process has waited for, in bytes, as the
// OS accounts it (getrusage(RUSAGE_CHILDREN).ru_maxrss): for a process that ran one child, that
// child's high-water mark, which no sampler can miss (bench/resume_bench). An error where the
// OS keeps no such figure (Windows).
result<std::uint64_t> waited_children_peak_rss_bytes();

}  // namespace baton::os
