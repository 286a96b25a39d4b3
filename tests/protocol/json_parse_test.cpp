#include "protocol/json_parse.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace baton::protocol;

namespace {

std::string nested(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

}  // namespace

TEST_CASE("a clean document scans clean and builds", "[unit][json_parse]") {
  const std::string text = R"({"a": [1, {"b": null}], "c": "d"})";
  const auto scan = scan_json(text, json_limits{});
  CHECK(scan.clean());
  CHECK(build_scanned_json(text)["a"][1].contains("b"));
  auto ordered = parse_json_guarded<nlohmann::ordered_json>(R"({"z": 1, "a": 2})", 4);
  REQUIRE(ordered);
  CHECK(ordered->begin().key() == "z");
}

TEST_CASE("the size limit is checked before parsing", "[unit][json_parse]") {
  const auto scan = scan_json("[1, 2]", json_limits{.max_bytes = 5});
  REQUIRE(scan.fault);
  CHECK(scan.fault->what == json_fault::kind::too_large);
  CHECK(scan.fault->offset == 6);
  CHECK(scan.fault->limit == 5);
  CHECK(scan_json("[1, 2]", json_limits{.max_bytes = 6}).clean());
}

TEST_CASE("the depth limit allows max_depth levels and points at the next bracket",
          "[unit][json_parse]") {
  CHECK(scan_json(nested(8), json_limits{.max_depth = 8}).clean());
  const std::string text = R"({"s": "[[[[", "x": [[[[[[[[]]]]]]]]})";
  const auto scan = scan_json(text, json_limits{.max_depth = 8});
  REQUIRE(scan.fault);
  CHECK(scan.fault->what == json_fault::kind::too_deep);
  CHECK(scan.fault->limit == 8);
  CHECK(text[scan.fault->offset] == '[');
  CHECK(scan.fault->offset == text.find("[[[[[[[[") + 7);  // brackets in strings do not count
  CHECK(short_message(*scan.fault) == "nesting deeper than 8 levels");
  // A hostile depth costs no stack.
  CHECK(scan_json(nested(1'000'000), json_limits{.max_depth = 64}).fault);
}

TEST_CASE("a duplicate key stops the scan, or every one is listed with its path",
          "[unit][json_parse]") {
  const std::string text = R"({"a": 1, "b": [{"c": 1, "c": 2}], "a": 3})";
  const auto first = scan_json(text, json_limits{});
  REQUIRE(first.fault);
  CHECK(first.fault->what == json_fault::kind::duplicate_key);
  CHECK(first.fault->key == "c");
  CHECK(first.fault->path == "b[0].c");
  CHECK(short_message(*first.fault) == "duplicate key \"c\"");

  const auto all = scan_json(text, json_limits{.collect_duplicates = true});
  CHECK_FALSE(all.fault);
  REQUIRE(all.duplicates.size() == 2);
  CHECK(all.duplicates[0].path == "b[0].c");
  CHECK(all.duplicates[1].path == "a");
  // The same key in sibling objects is no duplicate.
  CHECK(scan_json(R"([{"a": 1}, {"a": 2}])", json_limits{}).clean());
}

TEST_CASE("a syntax error gives the offending byte and nlohmann's reason", "[unit][json_parse]") {
  const std::string text = "{\n  \"a\": tru }";
  const auto scan = scan_json(text, json_limits{});
  REQUIRE(scan.fault);
  CHECK(scan.fault->what == json_fault::kind::syntax);
  CHECK(scan.fault->offset == text.find(" }"));
  CHECK(scan.fault->reason.rfind("syntax error while parsing value", 0) == 0);
  CHECK(scan.fault->message.rfind("parse error at line 2, column ", 0) == 0);
  CHECK(line_column(text, scan.fault->offset) == "line 2, column 11 (byte 12)");
  CHECK(short_message(*scan.fault, 8).rfind("invalid JSON at byte 20: parse error at line 2", 0) ==
        0);
}

TEST_CASE("hostile bytes in a syntax error are shown as escapes", "[unit][json_parse]") {
  const auto scan = scan_json("[\"\xff\x01", json_limits{});
  REQUIRE(scan.fault);
  CHECK(scan.fault->reason.find('\xff') == std::string::npos);
  CHECK(scan.fault->reason.find("\\xff") != std::string::npos);
  CHECK(printable("a\nb\x7f") == "a\\x0ab\\x7f");
}

TEST_CASE("line_column counts lines from 1 and clamps past the end", "[unit][json_parse]") {
  CHECK(line_column("ab\ncd", 0) == "line 1, column 1 (byte 0)");
  CHECK(line_column("ab\ncd", 4) == "line 2, column 2 (byte 4)");
  CHECK(line_column("ab", 99) == "line 1, column 3 (byte 2)");
}

TEST_CASE("the one-pass build finds what the scan finds and builds what the parse builds",
          "[unit][json_parse]") {
  const std::vector<std::string> docs = {
      R"({"a": [1, {"b": null}], "c": "d"})",
      R"({"type":"progress","step":12,"loss":0.25,"metrics":{"acc":0.5}})",
      R"([1.5e300, -0, "\u00e9", true, false, null, {}, []])",
      R"({"a": 1, "a": 2})",
      R"({"x": {"y": 1, "z": {"y": 2, "y": 3}}})",
      R"({"a": [1, 2,]})",
      R"({"a": 1} trailing)",
      "{\"a\": \"\xff\"}",
      "",
      "   ",
      nested(8),
      nested(9),
      std::string(100000, '['),
      R"("just a string")",
      "12345678901234567890123",
  };
  for (const auto& text : docs) {
    INFO(text.substr(0, 60));
    for (const std::size_t depth : {std::size_t{8}, std::size_t{64}}) {
      const json_limits limits{.max_bytes = 50000, .max_depth = depth};
      const auto scan = scan_json(text, limits);
      nlohmann::json built = 42;
      const auto one = scan_and_build_json(text, limits, built);
      CHECK(one.clean() == scan.clean());
      if (scan.fault) {
        REQUIRE(one.fault);
        CHECK(one.fault->what == scan.fault->what);
        CHECK(one.fault->offset == scan.fault->offset);
        CHECK(short_message(*one.fault) == short_message(*scan.fault));
        CHECK(built.is_null());
      } else {
        CHECK(built == build_scanned_json(text));
      }
    }
  }
  auto progress = parse_json_guarded(R"({"step": 3, "metrics": {"acc": 0.5}})", 4);
  REQUIRE(progress);
  CHECK(progress->at("metrics").at("acc") == 0.5);
  auto dup = parse_json_guarded(R"({"step": 3, "step": 4})", 4);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().message == "duplicate key \"step\"");
}
