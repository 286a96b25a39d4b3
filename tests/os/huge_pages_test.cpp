#include "os/huge_pages.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>

TEST_CASE("advise_huge_pages advises only whole aligned huge pages inside the buffer",
          "[unit][huge_pages]") {
  constexpr std::size_t huge = std::size_t{2} << 20;
  const auto buf = std::make_unique_for_overwrite<char[]>(5 * huge);
  // Too small to hold an aligned 2 MiB page: nothing.
  CHECK(baton::os::advise_huge_pages(buf.get(), huge - 1) == 0);
  CHECK(baton::os::advise_huge_pages(buf.get(), 0) == 0);
  const std::size_t advised = baton::os::advise_huge_pages(buf.get(), 5 * huge);
  // Where the OS takes the advice, whole huge pages within the buffer; elsewhere nothing.
  CHECK(advised % huge == 0);
  CHECK(advised <= 5 * huge);
#if defined(__linux__)
  // 5 huge pages of room hold at least 4 aligned ones (unless THP is compiled out).
  CHECK((advised == 0 || advised >= 4 * huge));
#else
  CHECK(advised == 0);
#endif
  // A hint only: the memory is the caller's as before.
  buf[0] = 'a';
  buf[5 * huge - 1] = 'z';
  CHECK(buf[0] == 'a');
  CHECK(buf[5 * huge - 1] == 'z');
}

TEST_CASE("allocate_large_buffer starts a buffer of a huge page or more on a huge page",
          "[unit][huge_pages]") {
  constexpr std::size_t huge = std::size_t{2} << 20;
  for (const std::size_t bytes :
       {std::size_t{1}, std::size_t{4096}, huge - 1, huge, 7 * huge + 3}) {
    INFO("bytes " << bytes);
    void* p = baton::os::allocate_large_buffer(bytes);
    REQUIRE(p != nullptr);
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    CHECK(at % 64 == 0);
#if defined(__linux__)
    // Where the buffer can hold a huge page, it starts on one, so all its whole 2 MiB can be.
    if (bytes >= huge) CHECK(at % huge == 0);
#endif
    auto* c = static_cast<char*>(p);
    // Every byte is the caller's: the first and the last hold what is written there.
    c[0] = 'a';
    CHECK(c[0] == 'a');
    c[bytes - 1] = 'z';
    CHECK(c[bytes - 1] == 'z');
    baton::os::free_large_buffer(p);
  }
  baton::os::free_large_buffer(nullptr);  // as free() does: nothing
}

TEST_CASE("populate_pages makes whole pages resident and leaves every byte as it was",
          "[unit][huge_pages]") {
  constexpr std::size_t bytes = std::size_t{4} << 20;
  auto* p = static_cast<unsigned char*>(baton::os::allocate_large_buffer(bytes));
  REQUIRE(p != nullptr);
  // Part of it written before: those bytes must survive the call.
  for (std::size_t i = 0; i < bytes / 2; i += 4093) p[i] = static_cast<unsigned char>(i % 251);
  const bool populated = baton::os::populate_pages(p, bytes);
#if defined(__linux__)
  CHECK(populated);  // Debian 12's kernel (6.1) has MADV_POPULATE_WRITE (5.14)
#else
  CHECK_FALSE(populated);
#endif
  for (std::size_t i = 0; i < bytes / 2; i += 4093) {
    REQUIRE(p[i] == static_cast<unsigned char>(i % 251));
  }
  // Less than a whole page inside: nothing to populate.
  CHECK_FALSE(baton::os::populate_pages(p + 1, 4096));
  CHECK_FALSE(baton::os::populate_pages(p, 0));
  baton::os::free_large_buffer(p);
}

TEST_CASE("advise_small_pages advises only whole pages inside the buffer", "[unit][huge_pages]") {
  constexpr std::size_t bytes = std::size_t{4} << 20;
  auto* p = static_cast<char*>(baton::os::allocate_large_buffer(bytes));
  REQUIRE(p != nullptr);
#if defined(__linux__)
  CHECK(baton::os::advise_small_pages(p, bytes) == bytes);
  CHECK(baton::os::advise_small_pages(p + 1, 2 * 4096) == 4096);
#else
  CHECK(baton::os::advise_small_pages(p, bytes) == 0);
#endif
  CHECK(baton::os::advise_small_pages(p + 1, 4096) == 0);  // no whole page inside
  p[0] = 'a';
  CHECK(p[0] == 'a');
  baton::os::free_large_buffer(p);
}
