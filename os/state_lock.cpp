#include "os/state_lock.h"

#include <charconv>

namespace baton::os {

std::string format_lock_holder(const lock_holder& h) {
  return std::to_string(h.pid) + " " + h.role + "\n";
}

std::optional<lock_holder> parse_lock_holder(std::string_view text) {
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;  // not written whole (yet)
  text = text.substr(0, nl);
  const auto space = text.find(' ');
  lock_holder h;
  const auto digits = text.substr(0, space);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), h.pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || h.pid <= 0) return std::nullopt;
  if (space != std::string_view::npos) h.role = std::string(text.substr(space + 1));
  return h;
}

std::string held_message(const std::filesystem::path& dir, const std::filesystem::path& file,
                         const std::optional<lock_holder>& holder) {
  std::string who = "another process";
  if (holder) {
    who = (holder->role.empty() ? std::string("another process") : "`" + holder->role + "`") +
          " (pid " + std::to_string(holder->pid) + "; lock file " + file.string() + ")";
  } else {
    who += " (pid unknown; lock file " + file.string() + ")";
  }
  return "state directory " + dir.string() + " is in use by " + who;
}

}  // namespace baton::os
