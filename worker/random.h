// The worker's only source of randomness: xoshiro256** (Blackman & Vigna, "Scrambled linear
// pseudorandom number generators", ACM TOMS 2021) seeded through splitmix64. Unlike std::
// distributions its outputs are fixed by this code, so weights and data drawn from a seed are the
// same on every standard library; normal() also depends on libm's log/sqrt/cos.
#pragma once

#include <array>
#include <cstdint>

namespace baton::worker {

// Steele, Lea & Flood, "Fast splittable pseudorandom number generators" (OOPSLA 2014).
std::uint64_t splitmix64(std::uint64_t& state);

class rng {
 public:
  explicit rng(std::uint64_t seed);
  std::uint64_t next();
  double uniform();                      // [0, 1), 53 random bits
  double uniform(double lo, double hi);  // [lo, hi)
  double normal();  // N(0, 1), Box-Muller (Box & Muller 1958), both outputs used

 private:
  std::array<std::uint64_t, 4> s_{};
  double spare_normal_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace baton::worker
