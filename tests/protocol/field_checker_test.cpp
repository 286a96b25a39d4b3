#include "protocol/field_checker.h"

#include <catch2/catch.hpp>
#include <string>

using namespace baton::protocol;
using json = nlohmann::json;

namespace {
constexpr std::string_view keys[] = {"training", "model", "data"};
}

TEST_CASE("edit distance counts an adjacent transposition as one edit", "[unit][field_checker]") {
  CHECK(edit_distance("trainig", "training") == 1);
  CHECK(edit_distance("modle", "model") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "abc") == 0);
}

TEST_CASE("a close key is suggested, a far one lists the options", "[unit][field_checker]") {
  CHECK(suggestion("trainig", keys) == "did you mean \"training\"?");
  CHECK(suggestion("xyz", keys) == "expected one of training, model, data");
  // Never the whole word: two edits turn "ab" into anything of two letters.
  constexpr std::string_view short_keys[] = {"xy"};
  CHECK_FALSE(closest("ab", short_keys));
  CHECK(one_of(keys) == "training, model, data");
}

TEST_CASE("unknown keys are listed, known ones are not", "[unit][field_checker]") {
  const json j = json::parse(R"({"data": 1, "zeta": 2, "alpha": 3})");
  CHECK(unknown_keys(j, keys) == std::vector<std::string>{"alpha", "zeta"});  // std::map order
  CHECK(unknown_keys(json::object(), keys).empty());
}

TEST_CASE("paths join keys and indices", "[unit][field_checker]") {
  CHECK(child_path("", "a") == "a");
  CHECK(child_path("a", "b") == "a.b");
  CHECK(index_path("a.b", 3) == "a.b[3]");
}

TEST_CASE("describe keeps wrong values short", "[unit][field_checker]") {
  CHECK(describe(json::object()) == "{}");
  CHECK(describe(json{{"a", 1}}) == "an object");
  CHECK(describe(json::array()) == "[]");
  CHECK(describe(json{1, 2}) == "an array");
  CHECK(describe(json(12)) == "12");
  CHECK(describe(json("abc")) == "\"abc\"");
  CHECK(describe(json(std::string(64, 'a'))) == json(std::string(64, 'a')).dump());
  CHECK(describe(json(std::string(65, 'a'))) == "\"" + std::string(61, 'a') + "...\"");
}

TEST_CASE("describe cuts a long string on a UTF-8 character boundary", "[unit][field_checker]") {
  // 60 ASCII bytes then two-byte characters: byte 61 is the middle of "é", so the cut moves back
  // to byte 60. Before the kit the daemon settings cut at 61 and dump() threw type_error 316.
  const std::string s = std::string(60, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";
  std::string out;
  REQUIRE_NOTHROW(out = describe(json(s)));
  CHECK(out == "\"" + std::string(60, 'a') + "...\"");
  // A three-byte character straddling the cut: "€" at bytes 60-62.
  const std::string euro = std::string(60, 'a') + "\xe2\x82\xac" + std::string(10, 'b');
  CHECK(describe(json(euro)) == "\"" + std::string(60, 'a') + "...\"");
}

TEST_CASE("join_lines puts one problem on each line", "[unit][field_checker]") {
  CHECK(join_lines({}) == "");
  CHECK(join_lines({"a: x", "b: y"}) == "a: x\nb: y");
  CHECK(join_lines({"a: x", "b: y"}, "job.json: ") == "job.json: a: x\njob.json: b: y");
}
