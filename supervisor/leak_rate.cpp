#include "supervisor/leak_rate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace baton::supervisor {

std::optional<linear_fit> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2 || y.size() != n) return std::nullopt;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx == 0.0) return std::nullopt;
  linear_fit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  return f;
}

namespace {

template <class X>
std::optional<double> slope_against(const std::vector<rss_sample>& samples, X x_of) {
  std::vector<double> x, y;
  x.reserve(samples.size());
  y.reserve(samples.size());
  for (const auto& s : samples) {
    x.push_back(x_of(s));
    y.push_back(static_cast<double>(s.rss_bytes));
  }
  const auto fit = fit_line(x, y);
  if (!fit) return std::nullopt;
  return fit->slope;
}

}  // namespace

std::optional<double> leak_bytes_per_step(const std::vector<rss_sample>& samples) {
  return slope_against(samples, [](const rss_sample& s) { return static_cast<double>(s.step); });
}

std::optional<double> leak_bytes_per_second(const std::vector<rss_sample>& samples) {
  return slope_against(samples,
                       [](const rss_sample& s) { return static_cast<double>(s.time_ms) / 1000.0; });
}

namespace {

void add_point(leak_sums& s, double x, double y) {
  ++s.samples;
  const double n = static_cast<double>(s.samples);
  const double dx = x - s.mean_step;
  const double dy = y - s.mean_rss;
  s.mean_step += dx / n;
  s.mean_rss += dy / n;
  s.sxx += dx * (x - s.mean_step);
  s.sxy += dx * (y - s.mean_rss);
  s.syy += dy * (y - s.mean_rss);
}

// Chan et al.'s merge of two sets' centred sums (one set of points, one mean).
leak_sums merged(const leak_sums& a, const leak_sums& b) {
  if (a.samples == 0) return b;
  if (b.samples == 0) return a;
  leak_sums m;
  m.samples = a.samples + b.samples;
  m.distinct_steps = a.distinct_steps + b.distinct_steps;
  const double na = static_cast<double>(a.samples), nb = static_cast<double>(b.samples);
  const double n = na + nb;
  const double dx = b.mean_step - a.mean_step, dy = b.mean_rss - a.mean_rss;
  m.mean_step = a.mean_step + dx * nb / n;
  m.mean_rss = a.mean_rss + dy * nb / n;
  m.sxx = a.sxx + b.sxx + dx * dx * na * nb / n;
  m.sxy = a.sxy + b.sxy + dx * dy * na * nb / n;
  m.syy = a.syy + b.syy + dy * dy * na * nb / n;
  return m;
}

}  // namespace

void leak_tracker::add(std::int64_t step, std::uint64_t rss_bytes) {
  ++seen_;
  if (current_step_ != step) {
    if (current_step_ && current_step_ != first_step_) {
      current_.distinct_steps = 1;
      committed_ = merged(committed_, current_);
    }
    current_ = {};
    current_step_ = step;
    if (!first_step_) first_step_ = step;
  }
  add_point(current_, static_cast<double>(step), static_cast<double>(rss_bytes));
}

leak_sums steady_sums(const std::vector<rss_sample>& samples) {
  leak_tracker t;
  for (const auto& s : samples) t.add(s.step, s.rss_bytes);
  return t.steady();
}

namespace {

// Student's t at 97.5% for 1..30 degrees of freedom; past 30 the normal's 1.96 is within 2%.
double t975(std::int64_t df) {
  static constexpr std::array<double, 30> table = {
      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return table[0];
  if (df <= 30) return table[static_cast<std::size_t>(df - 1)];
  return 1.96;
}

}  // namespace

result<leak_estimate> estimate_leak(const std::vector<leak_sums>& workers) {
  leak_sums all;
  std::int64_t used = 0;
  for (const auto& w : workers) {
    if (w.samples == 0) continue;
    all.samples += w.samples;
    all.distinct_steps += w.distinct_steps;
    all.sxx += w.sxx;
    all.sxy += w.sxy;
    all.syy += w.syy;
    ++used;
  }
  // One intercept per worker and the shared slope use up used + 1 degrees of freedom.
  const std::int64_t df = all.samples - used - 1;
  if (all.samples < min_leak_samples || all.distinct_steps < min_leak_steps || all.sxx <= 0.0 ||
      df < 1) {
    return make_error("not enough samples (" + std::to_string(all.samples) +
                      " in the steady part, at least " + std::to_string(min_leak_samples) +
                      " over " + std::to_string(min_leak_steps) + " steps needed)");
  }
  leak_estimate e;
  e.bytes_per_step = all.sxy / all.sxx;
  const double residual = std::max(0.0, all.syy - e.bytes_per_step * all.sxy);
  e.ci95_bytes_per_step = t975(df) * std::sqrt(residual / static_cast<double>(df) / all.sxx);
  e.samples = all.samples;
  e.workers = used;
  return e;
}

result<leak_estimate> estimate_leak(const std::vector<rss_sample>& samples) {
  return estimate_leak(std::vector<leak_sums>{steady_sums(samples)});
}

}  // namespace baton::supervisor
