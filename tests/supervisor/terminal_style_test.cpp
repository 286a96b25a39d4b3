#include "supervisor/terminal_style.h"

#include <catch2/catch.hpp>

using namespace baton::supervisor;

TEST_CASE("colour only on a terminal, never under a non-empty NO_COLOR unless forced",
          "[unit][terminal_style]") {
  const std::optional<std::string> unset;
  const std::optional<std::string> empty = std::string();
  const std::optional<std::string> set = std::string("1");
  CHECK(use_colour(colour_choice::automatic, true, unset));
  CHECK_FALSE(use_colour(colour_choice::automatic, false, unset));  // a pipe or a file
  CHECK_FALSE(use_colour(colour_choice::automatic, true, set));
  CHECK(use_colour(colour_choice::automatic, true, empty));  // NO_COLOR= is as if unset
  CHECK(use_colour(colour_choice::always, false, set));      // the flag beats the variable
  CHECK_FALSE(use_colour(colour_choice::never, true, unset));
}

TEST_CASE("the --color flag takes auto, always or never", "[unit][terminal_style]") {
  CHECK(*parse_colour_choice("auto") == colour_choice::automatic);
  CHECK(*parse_colour_choice("always") == colour_choice::always);
  CHECK(*parse_colour_choice("never") == colour_choice::never);
  const auto bad = parse_colour_choice("yes");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "--color 'yes': expected auto, always or never");
}

TEST_CASE("states are coloured by meaning and padded outside the escape codes",
          "[unit][terminal_style]") {
  CHECK(paint_state("completed", true) == "\x1b[1;32mcompleted\x1b[0m");
  CHECK(paint_state("running", true) == "\x1b[32mrunning\x1b[0m");
  CHECK(paint_state("failed", true) == "\x1b[31mfailed\x1b[0m");
  CHECK(paint_state("crashed", true) == "\x1b[31mcrashed\x1b[0m");
  CHECK(paint_state("paused", true) == "\x1b[33mpaused\x1b[0m");
  CHECK(paint_state("backoff", true) == "\x1b[33mbackoff\x1b[0m");
  CHECK(paint_state("queued", true) == "queued");  // nothing to signal
  CHECK(paint_state("failed", false) == "failed");
  CHECK(paint_state("failed", true, 10) == "\x1b[31mfailed\x1b[0m    ");
  CHECK(paint_state("failed", false, 10) == "failed    ");
  CHECK(error_prefix(true) == "\x1b[1;31mbaton:\x1b[0m ");
  CHECK(error_prefix(false) == "baton: ");
}
