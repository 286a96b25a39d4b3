#include "os/windows_command_line.h"

namespace baton::os {

std::string windows_command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    if (!arg.empty() && arg.find_first_of(" \t\n\v\"") == std::string::npos) {
      out += arg;
      continue;
    }
    out += '"';
    std::size_t backslashes = 0;
    for (const char c : arg) {
      if (c == '\\') {
        ++backslashes;
        continue;
      }
      // Backslashes escape only a quote: double them there (plus one for the quote itself).
      out.append(c == '"' ? backslashes * 2 + 1 : backslashes, '\\');
      backslashes = 0;
      out += c;
    }
    out.append(backslashes * 2, '\\');  // they precede the closing quote
    out += '"';
  }
  return out;
}

}  // namespace baton::os
