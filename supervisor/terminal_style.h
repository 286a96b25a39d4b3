// Colour on a terminal, and only there: whether a stream gets ANSI colour (the --color flag,
// whether the stream is a terminal, and NO_COLOR as https://no-color.org asks), and the painting
// of state names and error prefixes. Pure: the caller asks the OS whether a stream is a terminal
// (os::stdout_is_terminal) and reads NO_COLOR, and every format function takes a `bool colour`,
// so the same text is tested with and without escape codes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace baton::supervisor {

// `--color=auto|always|never`. `always` overrides NO_COLOR: the flag is the user's explicit
// request for this one command, the variable a standing preference (no-color.org: "user-level
// configuration files and per-instance command-line arguments should override NO_COLOR").
enum class colour_choice { automatic, always, never };

result<colour_choice> parse_colour_choice(std::string_view text);

// automatic: colour when the stream is a terminal and NO_COLOR is unset or empty.
bool use_colour(colour_choice choice, bool stream_is_terminal,
                const std::optional<std::string>& no_color);

// `text` wrapped in the SGR sequence `sgr` ("1;32") and a reset; `text` itself when !colour.
std::string paint(std::string_view text, std::string_view sgr, bool colour);

// A job state or a worker's exit cause, coloured by what it means to the user: running green,
// completed bold green, failed and the failure causes (crashed, stalled, spawn_failed) red,
// paused, backoff and a hard-limit kill yellow, the rest plain. Padded with spaces to `width`
// outside the escape codes, so a table's columns line up either way.
std::string paint_state(std::string_view name, bool colour, std::size_t width = 0);

// "baton: " with "baton:" in bold red: the prefix of the CLI's error lines.
std::string error_prefix(bool colour);

}  // namespace baton::supervisor
