#include "supervisor/control_token.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

using namespace baton::supervisor;

namespace {
const std::string good(64, 'a');
}

TEST_CASE("tokens are 64 lowercase hex digits and never repeat", "[unit][control_token]") {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    auto t = make_control_token();
    REQUIRE(t);
    CHECK(t->size() == control_token_chars);
    CHECK(is_valid_control_token(*t));
    seen.insert(*t);
  }
  CHECK(seen.size() == 50);
}

TEST_CASE("token syntax", "[unit][control_token]") {
  CHECK(is_valid_control_token(good));
  CHECK(is_valid_control_token(std::string(32, '0') + std::string(32, 'f')));
  CHECK_FALSE(is_valid_control_token(""));
  CHECK_FALSE(is_valid_control_token(std::string(63, 'a')));
  CHECK_FALSE(is_valid_control_token(std::string(65, 'a')));
  CHECK_FALSE(is_valid_control_token(std::string(63, 'a') + "A"));
  CHECK_FALSE(is_valid_control_token(std::string(63, 'a') + "g"));
  CHECK_FALSE(is_valid_control_token(std::string(63, 'a') + " "));
}

TEST_CASE("tokens_equal compares length and every byte", "[unit][control_token]") {
  CHECK(tokens_equal(good, good));
  CHECK(tokens_equal("", ""));
  CHECK_FALSE(tokens_equal(good, std::string(63, 'a')));
  CHECK_FALSE(tokens_equal(std::string(63, 'a'), good));
  CHECK_FALSE(tokens_equal(good, ""));
  auto last = good;
  last.back() = 'b';
  CHECK_FALSE(tokens_equal(good, last));
  auto first = good;
  first.front() = 'b';
  CHECK_FALSE(tokens_equal(good, first));
  // A prefix followed by a NUL must not pass as the shorter string.
  CHECK_FALSE(tokens_equal(good + std::string(1, '\0'), good));
}

TEST_CASE("check_bearer accepts only the expected token", "[unit][control_token]") {
  CHECK_FALSE(check_bearer("Bearer " + good, good));
  CHECK_FALSE(check_bearer("bearer " + good, good));  // the scheme is case-insensitive
  CHECK_FALSE(check_bearer("BEARER   " + good + " ", good));

  auto missing = check_bearer(std::nullopt, good);
  REQUIRE(missing);
  CHECK(missing->status == 401);
  CHECK_THAT(missing->message, Catch::Contains("missing Authorization header"));

  for (const std::string& v : std::vector<std::string>{"Basic dXNlcjpwYXNz", "Bearer",
                                                       "Bearer" + good, "", "Token " + good}) {
    auto e = check_bearer(v, good);
    INFO(v);
    REQUIRE(e);
    CHECK(e->status == 401);
    CHECK_THAT(e->message, Catch::Contains("not a Bearer credential"));
  }
  const std::string wrong = std::string(63, 'a') + "b";
  for (const std::string& v :
       std::vector<std::string>{"Bearer " + wrong, "Bearer " + good + "a", "Bearer ",
                                "Bearer " + std::string(good.begin(), good.end() - 1)}) {
    auto e = check_bearer(v, good);
    INFO(v);
    REQUIRE(e);
    CHECK(e->status == 401);
    CHECK_THAT(e->message, Catch::Contains("wrong control token"));
    CHECK_THAT(e->message, !Catch::Contains(wrong));  // never echoes what was sent
  }
}
