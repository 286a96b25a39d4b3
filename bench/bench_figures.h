// What every benchmark prints its figures with: the median of its runs and the CPU it ran on
// (machines differ from session to session, so a figure without its CPU says little).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "os/env.h"

namespace baton::bench {

// NaN for no runs.
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The "model name" of /proc/cpuinfo, or why there is none.
inline std::string cpu_model() {
  auto text = os::env::default_env().read_file("/proc/cpuinfo");
  if (!text) return "unknown (no /proc/cpuinfo)";
  const auto at = text->find("model name");
  if (at == std::string::npos) return "unknown";
  const auto colon = text->find(':', at);
  const auto end = text->find('\n', at);
  if (colon == std::string::npos || colon > end) return "unknown";
  return text->substr(colon + 2, end - colon - 2);
}

}  // namespace baton::bench
