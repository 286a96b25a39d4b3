#include "worker/random.h"

#include <bit>
#include <cmath>
#include <limits>

#include "worker/parallel.h"

// Normals promise the same bits everywhere, so a*b+c must not be fused into one FMA on some
// targets and rounded twice on others (GCC contracts even in ISO mode).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace baton::worker {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

rng::rng(std::uint64_t seed) {
  // splitmix64 never yields four zero words, the one state xoshiro cannot leave.
  for (auto& w : s_) w = splitmix64(seed);
}

std::uint64_t rng::next() {
  const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

double rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

std::uint64_t rng::below(std::uint64_t n) {
  // 2^64 mod n values at the bottom would make small results more likely; skip them.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t r = next();
    if (r >= threshold) return r % n;
  }
}

std::array<double, 3> rng::accepted_pair() {
  double u = 0, v = 0, s = 0;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return {u, v, s};
}

double rng::polar_factor(double s) { return std::sqrt(-2.0 * portable_log(s) / s); }

double rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  const auto [u, v, s] = accepted_pair();
  const double f = polar_factor(s);
  spare_normal_ = v * f;
  has_spare_ = true;
  return u * f;
}

void rng::normals(std::span<double> out) {
  std::size_t i = 0;
  if (i < out.size() && has_spare_) {
    has_spare_ = false;
    out[i++] = spare_normal_;
  }
  const std::size_t pairs = (out.size() - i + 1) / 2;
  if (pairs == 0) return;
  // An odd count ends on the first of a pair, whose second becomes the spare, as in normal().
  const bool last_half = (out.size() - i) % 2 == 1;
  double* const dst = out.data() + i;
  // The serial half, exactly the rejection loop of normal(): each accepted (u, v) lands where its
  // normals will go (the last v of an odd count in last_v), and s is recomputed from them below,
  // the same bits without FP contraction.
  double last_u = 0, last_v = 0;
  for (std::size_t k = 0; k < pairs; ++k) {
    const auto uvs = accepted_pair();
    dst[2 * k] = uvs[0];
    if (last_half && k + 1 == pairs) {
      last_u = uvs[0];
      last_v = uvs[1];
    } else {
      dst[2 * k + 1] = uvs[1];
    }
  }
  // ~40 flops a pair (the log's series and a division, the square root).
  parallel_for(static_cast<std::int64_t>(pairs), 40, [&](std::int64_t b, std::int64_t e) {
    for (auto k = static_cast<std::size_t>(b); k < static_cast<std::size_t>(e); ++k) {
      const bool half = last_half && k + 1 == pairs;
      const double u = dst[2 * k], v = half ? last_v : dst[2 * k + 1];
      const double f = polar_factor(u * u + v * v);
      dst[2 * k] = u * f;
      if (!half) dst[2 * k + 1] = v * f;
    }
  });
  // normal() leaves the last pair's second in spare_normal_ even once it is used, and state()
  // saves that word: it is kept alike so that the two leave the very same state.
  if (last_half) {
    spare_normal_ = last_v * polar_factor(last_u * last_u + last_v * last_v);
    has_spare_ = true;
  } else {
    spare_normal_ = dst[2 * pairs - 1];
  }
}

rng::state_words rng::state() const {
  return {s_[0],
          s_[1],
          s_[2],
          s_[3],
          has_spare_ ? 1u : 0u,
          std::bit_cast<std::uint64_t>(spare_normal_)};
}

void rng::set_state(const state_words& s) {
  for (std::size_t i = 0; i < 4; ++i) s_[i] = s[i];
  has_spare_ = s[4] != 0;
  spare_normal_ = std::bit_cast<double>(s[5]);
}

namespace {
// 2 / (2j + 1) for j = 1..13; z^13 < 1e-19 for |s| < 0.172, far below an ulp of log(1+f).
constexpr std::array<double, 13> log_coeffs = [] {
  std::array<double, 13> c{};
  for (std::size_t j = 0; j < c.size(); ++j) c[j] = 2.0 / (2.0 * static_cast<double>(j + 1) + 1.0);
  return c;
}();
}  // namespace

double portable_log(double x) {
  if (!(x > 0) || !std::isfinite(x)) {
    if (x == 0) return -std::numeric_limits<double>::infinity();
    if (x > 0) return x;  // +inf
    return std::numeric_limits<double>::quiet_NaN();
  }
  // x = m * 2^k with m in [sqrt(1/2), sqrt(2)); frexp is exact.
  int k = 0;
  double m = std::frexp(x, &k);
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    k -= 1;
  }
  // log(1+f) = 2 atanh(s), s = f / (2 + f), |s| < 0.172; written as fdlibm's e_log.c does,
  // f - hfsq + s (hfsq + R), with R the Taylor tail sum 2 s^(2j) / (2j + 1), j >= 1.
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s;
  double r = 0;
  for (std::size_t j = log_coeffs.size(); j-- > 0;) r = r * z + log_coeffs[j];
  r = r * z;
  const double hfsq = 0.5 * f * f;
  const double log_m = f - (hfsq - s * (hfsq + r));
  // ln 2 split so that k * ln2_hi is exact for |k| < 2^11 (fdlibm's constants).
  constexpr double ln2_hi = 6.93147180369123816490e-01;
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  const double dk = static_cast<double>(k);
  return dk * ln2_hi + (log_m + dk * ln2_lo);
}

}  // namespace baton::worker
