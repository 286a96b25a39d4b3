#include "supervisor/leak_rate.h"

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

}  // namespace baton::supervisor
