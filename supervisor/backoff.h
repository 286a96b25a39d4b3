// Restart delays after worker failures: exponential backoff with a cap (initial * multiplier^n,
// at most `max_ms`), and never below the s6 floor of one second between restarts. Pure
// functions of the attempt number; the caller (supervisor/job_machine.h) keeps that number and
// sets it back to 0 after a success (the checkpoint advanced).
#pragma once

#include <cstdint>

#include "protocol/job_spec.h"

namespace baton::supervisor {

struct backoff_policy {
  std::int64_t initial_ms = 1000;
  double multiplier = 2.0;
  std::int64_t max_ms = 60000;
  std::int64_t floor_ms = 1000;  // s6: a crash loop never spins faster than once a second
};

backoff_policy backoff_from(const protocol::restart_spec& spec);

// Delay before restart number `attempt` (0 for the first restart after a success):
// clamp(initial * multiplier^attempt, floor, max(max_ms, floor)). Saturates, never overflows.
std::int64_t backoff_delay_ms(const backoff_policy& policy, int attempt);

}  // namespace baton::supervisor
