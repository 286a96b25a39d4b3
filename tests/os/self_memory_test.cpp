#include "os/self_memory.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "os/system.h"

TEST_CASE("own_rss_bytes counts this process's resident memory, and memory it touches",
          "[unit][system]") {
  const auto before = baton::os::own_rss_bytes();
  REQUIRE(before);
  CHECK(*before > (std::uint64_t{1} << 20));  // a running test program holds more than 1 MiB
  CHECK(*before < baton::os::physical_memory_bytes());
  std::vector<char> block(std::size_t{64} << 20);
  for (std::size_t i = 0; i < block.size(); i += 4096) block[i] = 1;
  const auto after = baton::os::own_rss_bytes();
  REQUIRE(after);
  CHECK(*after >= *before + (std::uint64_t{48} << 20));
  CHECK(block[4096] == 1);
}
