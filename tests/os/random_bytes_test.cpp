#include "os/random_bytes.h"

#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

TEST_CASE("fill_random fills every byte and differs between calls", "[unit][random_bytes]") {
  std::array<std::uint8_t, 32> a{}, b{};
  REQUIRE(baton::os::fill_random(a));
  REQUIRE(baton::os::fill_random(b));
  CHECK(a != b);  // 2^-256 chance of a false failure
  // A large buffer: every byte value shows up, so nothing was left zero-filled.
  std::vector<std::uint8_t> big(1 << 16);
  REQUIRE(baton::os::fill_random(big));
  std::array<int, 256> counts{};
  for (auto v : big) ++counts[v];
  for (int c : counts) CHECK(c > 0);
  REQUIRE(baton::os::fill_random(std::span<std::uint8_t>()));  // empty is fine
}
