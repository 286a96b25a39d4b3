#include "os/self_memory.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "os/process.h"
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

TEST_CASE("waited_children_peak_rss_bytes is the high-water mark of a child that has ended",
          "[integration][system]") {
#ifdef _WIN32
  CHECK_FALSE(baton::os::waited_children_peak_rss_bytes());
#else
  // A child that fills 40 MiB and exits: after its wait, its peak is on record, whatever this
  // process ran before (the figure is the largest child's).
  boost::asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {"python3", "-c", "b = b'x' * (40 << 20)"};
  auto p = baton::os::spawn(io, o);
  REQUIRE(p);
  std::optional<baton::os::exit_status> st;
  (*p)->async_wait([&](const boost::system::error_code&, baton::os::exit_status s) { st = s; });
  io.run_for(std::chrono::seconds(60));
  REQUIRE(st);
  CHECK(st->success());
  const auto peak = baton::os::waited_children_peak_rss_bytes();
  REQUIRE(peak);
  CHECK(*peak >= (std::uint64_t{40} << 20));
  CHECK(*peak < baton::os::physical_memory_bytes());
#endif
}
