// What every benchmark prints its figures with: the median of its runs and the CPU it ran on
// (machines differ from session to session, so a figure without its CPU says little).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "os/env.h"

namespace baton::bench {

// The benchmark's own name, for its error messages: each one that calls die() defines it,
// `const char* const baton::bench::bench_name = "shard_switch_bench";`.
extern const char* const bench_name;

// "<bench_name>: <why>" on stderr and exit 1: a benchmark that cannot run says why and stops.
[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", bench_name, why.c_str());
  std::exit(1);
}

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
