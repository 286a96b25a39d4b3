// Memory leak rate of a worker from its RSS samples: the ordinary least-squares slope of RSS
// against the training step (bytes per step) and against time (bytes per second).
//
// What users are shown is estimate_leak: the slope over each worker's steady part only, with a 95%
// confidence interval, pooled over workers (one slope, an intercept per worker, so the drop at
// every recycle is not read as a negative leak). The steady part leaves out the samples taken at
// the worker's first reported step (start-up: imports, data, the model, the optimizer's state
// allocated by the first step) and at its last (the checkpoint being written, the exit), which are
// what made a raw fit over a whole short worker say -0.15 MiB/step for a 1 MiB/step leak. Too
// few samples give "not enough samples" and how many there are, never a number from noise.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"

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

// One worker's steady part as centred sums against the step (Welford's running form, so adding a
// sample is O(1) and nothing per sample is kept), which is all a fit and a pooled fit need.
struct leak_sums {
  std::int64_t samples = 0;
  std::int64_t distinct_steps = 0;
  double mean_step = 0.0;
  double mean_rss = 0.0;
  double sxx = 0.0;  // sum of (step - mean step)^2
  double sxy = 0.0;  // sum of (step - mean step) * (rss - mean rss)
  double syy = 0.0;  // sum of (rss - mean rss)^2
};

// Follows one worker's samples in the order they were taken and keeps the sums of its steady
// part: every step but the first one seen and the newest one (which is still going on, or was the
// checkpoint and the exit). Memory is constant however long the worker runs.
class leak_tracker {
 public:
  // `step`: the newest step the worker had reported when the sample was taken.
  void add(std::int64_t step, std::uint64_t rss_bytes);
  const leak_sums& steady() const { return committed_; }
  std::int64_t samples_seen() const { return seen_; }

 private:
  std::optional<std::int64_t> first_step_;
  std::optional<std::int64_t> current_step_;
  leak_sums committed_;  // finished steps after the first
  leak_sums current_;    // the samples of current_step_
  std::int64_t seen_ = 0;
};

// The steady part of samples in the order they were taken (all of one worker).
leak_sums steady_sums(const std::vector<rss_sample>& samples);

// A steady part needs this much before it says anything: three steps between start-up and the
// final checkpoint, and enough samples for a confidence interval worth printing.
inline constexpr std::int64_t min_leak_steps = 3;
inline constexpr std::int64_t min_leak_samples = 6;

struct leak_estimate {
  double bytes_per_step = 0.0;
  double ci95_bytes_per_step = 0.0;  // half-width: the rate is within +- this with 95% confidence
  std::int64_t samples = 0;          // in the steady parts fitted
  std::int64_t workers = 0;          // workers whose steady part took part
};

// The pooled slope over the workers' steady parts. An error "not enough samples (N in the steady
// part, at least 6 over 3 steps needed)" when the parts together are too short.
result<leak_estimate> estimate_leak(const std::vector<leak_sums>& workers);
// One worker's estimate.
result<leak_estimate> estimate_leak(const std::vector<rss_sample>& samples);

}  // namespace baton::supervisor
