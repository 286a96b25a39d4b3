// A worker's stdout line as the supervisor reads it. A chatty trainer shares stdout with the
// protocol: print() text, and progress bars that end without a newline right before a protocol
// message, so that the message arrives on the same line after the bar's text. Reading a line
// splits it into the text to keep in the job's log and the message to act on; pure, no I/O.
#pragma once

#include <optional>
#include <string_view>

#include "protocol/messages.h"

namespace baton::protocol {

struct worker_line {
  std::string_view text;  // for the job's log; empty: nothing to log
  std::optional<worker_message> message;
  // Set instead of `message` when the part from the '{' is meant as a message (JSON with a
  // known "type") but breaks its schema: the worker broke the protocol.
  std::optional<error> violation;
};

// A line that starts with '{' is a message if it decodes, else text. A line with a '{' later on
// is text up to that '{' and a message from there, if that part decodes; if it does not, the
// whole line is text. Text that is only whitespace (the remains of a redrawn progress bar) is
// not worth a log line and comes back empty. `text` points into `line`. The exception: a part
// that is JSON with a known message type but wrong fields ("step":"40") is a violation, never
// text, so a worker cannot slip a broken checkpoint or done line past the supervisor.
worker_line read_worker_line(std::string_view line);

}  // namespace baton::protocol
