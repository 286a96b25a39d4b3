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

TEST_CASE("a carriage return ends a line, so progress bars do not swallow protocol lines",
          "[unit][line_splitter]") {
  baton::os::line_splitter s(64);
  collected c;
  // A progress bar redraws itself with '\r' and never prints '\n'; the JSON line comes after.
  for (int i = 0; i < 3; ++i) s.feed("epoch 1 [=====>   ] 45%\r", c.sink());
  s.feed("{\"type\":\"hello\"}\n", c.sink());
  CHECK(c.lines == std::vector<std::string>{"epoch 1 [=====>   ] 45%", "epoch 1 [=====>   ] 45%",
                                            "epoch 1 [=====>   ] 45%", "{\"type\":\"hello\"}"});
  CHECK(c.cut.empty());
}

TEST_CASE("a JSON line right after carriage-return-only text is a line of its own",
          "[unit][line_splitter]") {
  baton::os::line_splitter s(64);
  collected c;
  // Split at every byte: the line ends must not depend on how the pipe chunks the stream.
  const std::string stream = "10%\r20%\r{\"type\":\"done\"}\r\nafter\r";
  for (const char ch : stream) s.feed(std::string_view(&ch, 1), c.sink());
  s.finish(c.sink());
  CHECK(c.lines == std::vector<std::string>{"10%", "20%", "{\"type\":\"done\"}", "after"});
}

TEST_CASE("CR LF is one line end and empty lines are dropped", "[unit][line_splitter]") {
  baton::os::line_splitter s(64);
  collected c;
  s.feed("a\r\n\r\n\n\r\rb\r", c.sink());
  s.feed("\nc\n\n", c.sink());
  s.finish(c.sink());
  CHECK(c.lines == std::vector<std::string>{"a", "b", "c"});
  CHECK(c.cut.empty());
}

TEST_CASE("cut lines end at a carriage return too", "[unit][line_splitter]") {
  baton::os::line_splitter s(8);
  collected c;
  // The runaway bar is cut once and skipped to its '\r'; the lines after it are whole.
  s.feed("[==========", c.sink());
  s.feed("=====] 99%\r{\"a\":1}\r\n01234567\r012345678\nok\r", c.sink());
  s.finish(c.sink());
  CHECK(c.cut == std::vector<std::string>{"[=======", "01234567"});
  CHECK(c.lines == std::vector<std::string>{"{\"a\":1}", "01234567", "ok"});
}
