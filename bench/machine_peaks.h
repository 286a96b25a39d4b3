// What the machine a benchmark runs on can do at most, measured by the benchmark itself: the
// vector ISA the binary was built for and the CPU reports, the single-precision FMA peak (FLOP/s
// of a register-only loop of independent fused multiply-adds, on N threads), and the streaming
// bandwidth (a STREAM-style triad over arrays far larger than the caches). worker_bench divides
// its own figures by these, so that "49 GFLOP/s" reads as "half the peak" on any CPU: the
// machines this project is measured on differ from session to session (AVX-512 or not).
// Stateless functions; each call runs its loop afresh (about `seconds` of wall time). Also what
// memory the process has never touched costs to fault in, which sets a floor under a shard
// switch: the next worker's state and the new checkpoint's page cache both land in fresh memory,
// and under a hypervisor that costs far more than on bare metal.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include "os/env.h"
#include "os/huge_pages.h"

namespace baton::bench {

// "AVX-512F" / "AVX2+FMA" / ... as compiled (-march=native: the CPU of the build), then the
// matching flags /proc/cpuinfo lists for this CPU.
inline std::string vector_isa() {
  std::string built =
#if defined(__AVX512F__)
      "AVX-512F";
#elif defined(__AVX2__) && defined(__FMA__)
      "AVX2+FMA";
#elif defined(__AVX__)
      "AVX (no FMA)";
#elif defined(__SSE2__)
      "SSE2";
#else
      "no x86 vector ISA";
#endif
  std::string cpu;
  if (auto text = os::env::default_env().read_file("/proc/cpuinfo")) {
    const auto at = text->find("\nflags");
    const auto line =
        at == std::string::npos ? std::string() : text->substr(at, text->find('\n', at + 1) - at);
    for (const char* flag : {"avx512f", "avx2", "fma", "avx", "sse2"}) {
      if (line.find(std::string(" ") + flag + " ") != std::string::npos ||
          line.find(std::string(" ") + flag + "\n") != std::string::npos) {
        cpu += cpu.empty() ? flag : std::string(" ") + flag;
      }
    }
  }
  return "built for " + built + "; CPU flags: " + (cpu.empty() ? "unknown" : cpu);
}

namespace peaks_detail {

// Register-only FMAs: 12 independent accumulators hide the FMA latency (4 cycles, 2 units: 8
// in flight) on every x86 core of the last decade. Returns a value so the loop is not removed.
inline float fma_loop(std::int64_t iterations) {
#if defined(__AVX512F__)
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(k));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
    // Unrolled, so that the accumulators live in registers (a loop over k at -O2 keeps them in
    // memory and measures store forwarding instead).
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
  alignas(64) float out[16];
  float sum = 0;
  for (int k = 0; k < 12; ++k) {
    _mm512_store_ps(out, acc[k]);
    for (float v : out) sum += v;
  }
  return sum;
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(k));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
    // Unrolled, so that the accumulators live in registers (a loop over k at -O2 keeps them in
    // memory and measures store forwarding instead).
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  alignas(32) float out[8];
  float sum = 0;
  for (int k = 0; k < 12; ++k) {
    _mm256_store_ps(out, acc[k]);
    for (float v : out) sum += v;
  }
  return sum;
#else
  float acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = 1.0f + 0.01f * static_cast<float>(k);
  for (std::int64_t i = 0; i < iterations; ++i) {
    // Unrolled, so that the accumulators live in registers (a loop over k at -O2 keeps them in
    // memory and measures store forwarding instead).
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = acc[k] * 0.999999f + 1e-7f;
  }
  float sum = 0;
  for (float v : acc) sum += v;
  return sum;
#endif
}

inline constexpr double flops_per_iteration =
#if defined(__AVX512F__)
    12 * 16 * 2.0;
#elif defined(__AVX2__) && defined(__FMA__)
    12 * 8 * 2.0;
#else
    12 * 2.0;  // scalar multiply and add, counted as one FMA each
#endif

template <class F>
double wall_seconds_on_threads(int threads, F body) {
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace peaks_detail

// FLOP/s of `threads` threads each running the FMA loop at once, for about `seconds`; the best
// of three runs (the peak is what the machine can do, not what it did while busy).
inline double fma_peak_flops(int threads, double seconds) {
  using namespace peaks_detail;
  volatile float sink = 0;
  // Calibrate on one thread: iterations for `seconds` / 3 per run.
  std::int64_t iterations = 1 << 20;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + fma_loop(iterations);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.02) {
      iterations = static_cast<std::int64_t>(iterations * (seconds / 3) / s) + 1;
      break;
    }
    iterations *= 4;
  }
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    std::vector<float> out(threads);
    const double s =
        wall_seconds_on_threads(threads, [&](int t) { out[t] = fma_loop(iterations); });
    for (float v : out) sink = sink + v;
    best = std::max(best, threads * static_cast<double>(iterations) * flops_per_iteration / s);
  }
  return best;
}

// Bytes/s of a triad a[i] = b[i] + s * c[i] over three 64 MiB float arrays split across
// `threads` threads, counted as 3 x 64 MiB per pass (STREAM's convention: the write-allocate
// read of `a` is not counted). Best of `passes`.
inline double stream_triad_bytes_per_second(int threads, int passes) {
  const std::size_t n = (64u << 20) / sizeof(float);
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const double s = peaks_detail::wall_seconds_on_threads(threads, [&](int t) {
      const std::size_t lo = n * t / threads, hi = n * (t + 1) / threads;
      for (std::size_t i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
    });
    best = std::max(best, 3.0 * n * sizeof(float) / s);
  }
  volatile float sink = a[n / 2];
  (void)sink;
  return best;
}

// Milliseconds to fault in `bytes` of memory the process has never touched, one write per 4 KiB,
// on huge pages where the OS gives them (`huge`) or as it backs a plain allocation, once in each
// of `runs` buffers allocated afresh and given back (from 32 MiB on, glibc maps and unmaps every
// such buffer, so none is recycled warm by the process). The first run and the median: the
// kernel hands a freed huge page straight back, while one a hypervisor has taken back meanwhile
// (a balloon's free page reporting) costs it far more to back again, and the first run meets
// those. Both -1 where there is no memory for it.
struct fault_in_ms {
  double first = -1;
  double median = -1;
};
inline fault_in_ms fresh_fault_in_ms(std::size_t bytes, bool huge, int runs) {
  if (runs <= 0 || bytes == 0) return {};
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    auto* p = static_cast<char*>(os::allocate_large_buffer(bytes));
    if (p == nullptr) return {};
    // Where THP is `always`, a 2 MiB-aligned buffer would get huge pages unasked.
    if (huge) {
      os::advise_huge_pages(p, bytes);
    } else {
      os::advise_small_pages(p, bytes);
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(p)[i] = 1;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    os::free_large_buffer(p);
  }
  const double first = ms.front();
  std::sort(ms.begin(), ms.end());
  return {first, ms[ms.size() / 2]};
}

}  // namespace baton::bench
