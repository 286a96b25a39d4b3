// make_storage's fills: what each leaves resident. The RSS is the process's own, read before and
// after one large allocation, so only pages the fill touched count.
#include "worker/parameter.h"

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "os/self_memory.h"
#include "support/skip.h"
#include "support/thread_count_guard.h"
#include "worker/parallel.h"

using baton::worker::fault_in;
using baton::worker::make_storage;
using baton::worker::set_thread_count;
using baton::worker::storage_fill;

namespace {

constexpr std::size_t mib = 1 << 20;
constexpr std::size_t floats = 64 * mib / sizeof(float);

// RSS growth, in MiB, across making (and holding) 64 MiB of floats with `fill`.
double resident_growth_mib(storage_fill fill) {
  const auto before = baton::os::own_rss_bytes();
  REQUIRE(before);
  auto p = make_storage<float>(floats, fill);
  const auto after = baton::os::own_rss_bytes();
  REQUIRE(after);
  if (fill == storage_fill::zeroed) {
    bool all_zero = true;
    for (std::size_t i = 0; i < floats; i += 1024) all_zero = all_zero && p[i] == 0.0f;
    CHECK(all_zero);
  }
  return (static_cast<double>(*after) - static_cast<double>(*before)) / mib;
}

}  // namespace

TEST_CASE("faulted-in storage is resident without being written whole, uninitialised is not",
          "[unit]") {
#ifdef _WIN32
  BATON_SKIP("a fresh allocation's residency is Linux's (wine's heap may commit it at once)");
#endif
  const baton::worker::testing::thread_count_guard restore;
  for (int threads : {1, 2}) {  // a large fault-in is shared across the team
    CAPTURE(threads);
    set_thread_count(threads);
    CHECK(resident_growth_mib(storage_fill::uninitialised) < 8.0);
    CHECK(resident_growth_mib(storage_fill::faulted_in) > 56.0);
    CHECK(resident_growth_mib(storage_fill::zeroed) > 56.0);
  }
}

TEST_CASE("fault_in writes one element a page, and the last", "[unit]") {
  std::vector<double> v(3 * 512 + 7, 5.0);  // 4 KiB pages hold 512 doubles
  fault_in(v.data(), v.size());
  std::size_t written = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool expected = i % 512 == 0 || i == v.size() - 1;
    CHECK((v[i] == 0.0) == expected);
    written += v[i] == 0.0 ? 1 : 0;
  }
  CHECK(written == 5);
  fault_in(v.data(), 0);  // nothing to touch
}

TEST_CASE("fault_in of a buffer shared across threads writes the same elements", "[unit]") {
  // 4 MiB and more is split across the team: each thread's part must still start on a page.
  const baton::worker::testing::thread_count_guard restore;
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    set_thread_count(threads);
    std::vector<double> v((std::size_t{4} << 20) / sizeof(double) * 3 / 2 + 13, 5.0);
    fault_in(v.data(), v.size());
    std::size_t wrong = 0, written = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const bool expected = i % 512 == 0 || i == v.size() - 1;
      wrong += (v[i] == 0.0) != expected ? 1 : 0;
      written += v[i] == 0.0 ? 1 : 0;
    }
    CHECK(wrong == 0);
    CHECK(written == (v.size() + 511) / 512 + 1);
  }
}
