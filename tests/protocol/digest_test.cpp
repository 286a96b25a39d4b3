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
