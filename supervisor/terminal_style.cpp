#include "supervisor/terminal_style.h"

namespace baton::supervisor {

result<colour_choice> parse_colour_choice(std::string_view text) {
  if (text == "auto") return colour_choice::automatic;
  if (text == "always") return colour_choice::always;
  if (text == "never") return colour_choice::never;
  return make_error("--color '" + std::string(text) + "': expected auto, always or never");
}

bool use_colour(colour_choice choice, bool stream_is_terminal,
                const std::optional<std::string>& no_color) {
  switch (choice) {
    case colour_choice::always:
      return true;
    case colour_choice::never:
      return false;
    case colour_choice::automatic:
      break;
  }
  // no-color.org: set and non-empty disables; an empty NO_COLOR= is as if unset.
  return stream_is_terminal && !(no_color && !no_color->empty());
}

std::string paint(std::string_view text, std::string_view sgr, bool colour) {
  if (!colour || sgr.empty()) return std::string(text);
  return "\x1b[" + std::string(sgr) + "m" + std::string(text) + "\x1b[0m";
}

namespace {

std::string_view state_sgr(std::string_view name) {
  if (name == "completed") return "1;32";
  if (name == "running") return "32";
  if (name == "failed" || name == "crashed" || name == "stalled" || name == "spawn_failed")
    return "31";
  if (name == "paused" || name == "backoff" || name == "memory_hard") return "33";
  return {};
}

}  // namespace

std::string paint_state(std::string_view name, bool colour, std::size_t width) {
  std::string out = paint(name, state_sgr(name), colour);
  if (name.size() < width) out.append(width - name.size(), ' ');
  return out;
}

std::string error_prefix(bool colour) { return paint("baton:", "1;31", colour) + " "; }

}  // namespace baton::supervisor
