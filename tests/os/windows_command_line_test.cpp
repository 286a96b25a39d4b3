// Windows command lines: quoting only where needed, and a round trip through the C runtime's
// own splitting rules for every awkward argument, on every platform.
#include "os/windows_command_line.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using baton::os::windows_command_line;

namespace {

// The C runtime's (and CommandLineToArgvW's) split of the arguments after the program name:
// 2n backslashes + quote -> n backslashes and a quote toggle; 2n+1 -> n and a literal quote;
// backslashes before anything else are literal; "" inside quotes is a literal quote.
std::vector<std::string> split_windows_arguments(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (true) {
    while (i < line.size() && space(line[i])) ++i;
    if (i >= line.size()) break;
    std::string arg;
    bool quoted = false;
    while (i < line.size() && (quoted || !space(line[i]))) {
      std::size_t n = 0;
      while (i < line.size() && line[i] == '\\') {
        ++n;
        ++i;
      }
      if (i < line.size() && line[i] == '"') {
        arg.append(n / 2, '\\');
        if (n % 2 == 1) {
          arg += '"';
        } else if (quoted && i + 1 < line.size() && line[i + 1] == '"') {
          arg += '"';
          ++i;
        } else {
          quoted = !quoted;
        }
        ++i;
      } else {
        arg.append(n, '\\');
        if (i < line.size() && (quoted || !space(line[i]))) arg += line[i++];
      }
    }
    out.push_back(arg);
  }
  return out;
}

}  // namespace

TEST_CASE("windows_command_line quotes only what needs it", "[unit][windows_command_line]") {
  CHECK(windows_command_line({R"(C:\Program Files\baton\baton.exe)", "serve", "--service"}) ==
        R"("C:\Program Files\baton\baton.exe" serve --service)");
  CHECK(windows_command_line({R"(C:\baton\baton.exe)", R"(C:\data\settings.json)"}) ==
        R"(C:\baton\baton.exe C:\data\settings.json)");
  CHECK(windows_command_line({"a", ""}) == R"(a "")");
  CHECK(windows_command_line({"a", R"(say "hi")"}) == R"(a "say \"hi\"")");
  // Trailing backslashes inside quotes are doubled, or they would escape the closing quote.
  CHECK(windows_command_line({"a", R"(C:\dir with space\)"}) == R"(a "C:\dir with space\\")");
  CHECK(windows_command_line({"a", R"(x\"y)"}) == R"(a "x\\\"y")");
  CHECK(windows_command_line({"a", R"(no\\space)"}) == R"(a no\\space)");
}

TEST_CASE("windows_command_line round-trips through the C runtime's split",
          "[unit][windows_command_line]") {
  const std::vector<std::string> args = {"plain",
                                         "",
                                         " ",
                                         "two words",
                                         R"(trail\)",
                                         R"(trail\\)",
                                         R"(q")",
                                         R"(\")",
                                         R"(\\")",
                                         R"(a\\\"b c)",
                                         "tab\there",
                                         R"(C:\P F\)",
                                         "\"quoted\"",
                                         "new\nline",
                                         R"(\\srv\share\x y\)",
                                         "caf\xc3\xa9 \xe2\x82\xac"};
  for (const auto& a : args) {
    INFO("argument [" << a << "]");
    const auto line = windows_command_line({"prog.exe", a, "next"});
    const auto back = split_windows_arguments(line);
    REQUIRE(back.size() == 3);
    CHECK(back[1] == a);
    CHECK(back[2] == "next");
  }
}
