// Memory leak rate of a worker from its RSS samples: the ordinary least-squares slope of RSS
// against the training step (bytes per step) and against time (bytes per second). The slope is
// what predicts when the soft limit will be hit and what the status report shows; fewer than two
// samples, or all samples at one x, give no estimate rather than a made-up number.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace baton::supervisor {

struct rss_sample {
  std::int64_t step = 0;
  std::int64_t time_ms = 0;  // monotonic clock
  std::uint64_t rss_bytes = 0;
};

struct linear_fit {
  double slope = 0.0;      // y per x
  double intercept = 0.0;  // y at x = 0
};

// Least squares y = intercept + slope * x. nullopt for < 2 points, mismatched sizes, or zero
// variance in x. Centred sums, so large x (steps in the millions, epoch-ms times) stay exact.
std::optional<linear_fit> fit_line(const std::vector<double>& x, const std::vector<double>& y);

std::optional<double> leak_bytes_per_step(const std::vector<rss_sample>& samples);
std::optional<double> leak_bytes_per_second(const std::vector<rss_sample>& samples);

}  // namespace baton::supervisor
