#include "supervisor/backoff.h"

#include <algorithm>
#include <cmath>

namespace baton::supervisor {

backoff_policy backoff_from(const protocol::restart_spec& spec) {
  backoff_policy p;
  p.initial_ms = spec.backoff_initial_ms;
  p.multiplier = spec.backoff_multiplier;
  p.max_ms = spec.backoff_max_ms;
  return p;
}

std::int64_t backoff_delay_ms(const backoff_policy& policy, int attempt) {
  const double cap = static_cast<double>(std::max(policy.max_ms, policy.floor_ms));
  const double multiplier = std::max(policy.multiplier, 1.0);
  double delay = static_cast<double>(std::max<std::int64_t>(policy.initial_ms, 0));
  // Multiply step by step and stop at the cap: pow() could overflow to inf for large attempts.
  for (int i = 0; i < attempt && delay < cap; ++i) delay *= multiplier;
  delay = std::clamp(delay, static_cast<double>(policy.floor_ms), cap);
  return static_cast<std::int64_t>(std::llround(delay));
}

}  // namespace baton::supervisor
