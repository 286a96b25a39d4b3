#include "os/line_splitter.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace {
struct collected {
  std::vector<std::string> lines;
  std::vector<std::string> cut;
  auto sink() {
    return [this](const boost::system::error_code& ec, std::string_view line) {
      (ec ? cut : lines).emplace_back(line);
      return true;
    };
  }
};
}  // namespace

TEST_CASE("lines split across chunks come out whole, without a carriage return",
          "[unit][line_splitter]") {
  baton::os::line_splitter s(64);
  collected c;
  s.feed("{\"type\":\"he", c.sink());
  s.feed("llo\"}\r\nsecond\nthi", c.sink());
  CHECK(c.lines == std::vector<std::string>{"{\"type\":\"hello\"}", "second"});
  s.finish(c.sink());
  CHECK(c.lines.back() == "thi");  // a last line without newline is still a line
  CHECK(c.cut.empty());
}

TEST_CASE("a line over the limit is cut once and its rest skipped", "[unit][line_splitter]") {
  baton::os::line_splitter s(8);
  collected c;
  s.feed("0123456789abc", c.sink());
  s.feed("def\nok\n", c.sink());
  CHECK(c.cut == std::vector<std::string>{"01234567"});
  CHECK(c.lines == std::vector<std::string>{"ok"});
  s.finish(c.sink());
  CHECK(c.lines.size() == 1);
}

TEST_CASE("the consumer can stop the splitting early", "[unit][line_splitter]") {
  baton::os::line_splitter s(64);
  int calls = 0;
  s.feed("a\nb\nc\n", [&](const boost::system::error_code&, std::string_view) {
    ++calls;
    return false;
  });
  CHECK(calls == 1);
}
