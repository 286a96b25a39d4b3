#include "protocol/digest.h"

#include <catch2/catch.hpp>

TEST_CASE("xxh64 matches the reference vectors", "[unit][digest]") {
  // Reference values from the xxHash specification's test vectors (seed 0).
  CHECK(baton::protocol::xxh64("") == 0xef46db3751d8e999ULL);
  CHECK(baton::protocol::xxh64("abc") == 0x44bc2cf5ad770999ULL);
}

TEST_CASE("xxh64 digest string is prefixed and fixed width", "[unit][digest]") {
  const auto d = baton::protocol::xxh64_digest("");
  CHECK(d == "xxh64:ef46db3751d8e999");
  CHECK(baton::protocol::xxh64_digest("abc") != baton::protocol::xxh64_digest("abd"));
}

TEST_CASE("hex16 writes 16 lowercase digits and parse_hex16 reads exactly those back",
          "[unit][digest]") {
  using baton::protocol::hex16;
  using baton::protocol::parse_hex16;
  CHECK(hex16(0) == "0000000000000000");
  CHECK(hex16(0xef46db3751d8e999ULL) == "ef46db3751d8e999");
  CHECK(hex16(~0ULL) == "ffffffffffffffff");
  for (const std::uint64_t v : {0ULL, 1ULL, 0x44bc2cf5ad770999ULL, ~0ULL}) {
    CHECK(parse_hex16(hex16(v)) == v);
  }
  // Only the form hex16 writes: a shorter, longer, uppercase or signed text is not a digest.
  CHECK_FALSE(parse_hex16("ef46db3751d8e99"));
  CHECK_FALSE(parse_hex16("ef46db3751d8e9990"));
  CHECK_FALSE(parse_hex16("EF46DB3751D8E999"));
  CHECK_FALSE(parse_hex16("+f46db3751d8e999"));
  CHECK_FALSE(parse_hex16("ef46db3751d8e99g"));
  CHECK_FALSE(parse_hex16(""));
}
