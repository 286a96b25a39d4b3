// The control endpoint file: how a client finds and authenticates to a daemon whose control API
// is loopback TCP (Windows). The daemon writes it at start, readable only by Administrators,
// SYSTEM, its own account and its group (os/private_file.h), and removes it at stop; clients read
// it to learn the port and the bearer token. Pure parsing and rendering here; the format is
// documented in protocol/README.md ("Control API").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "base/status.h"

namespace baton::os {
class env;
}

namespace baton::supervisor {

inline constexpr int control_endpoint_version = 1;
inline constexpr std::size_t max_control_endpoint_bytes = 4096;

struct control_endpoint {
  std::string address = "127.0.0.1";  // always IPv4 loopback: the daemon binds nowhere else
  std::uint16_t port = 0;
  std::string token;     // 64 lowercase hex digits (control_token.h)
  std::int64_t pid = 0;  // the daemon's, for humans and diagnostics only

  bool operator==(const control_endpoint&) const = default;
};

// One JSON object and a newline:
// {"version":1,"address":"127.0.0.1","port":50123,"token":"<64 hex>","pid":4242}
std::string render_control_endpoint(const control_endpoint& e);

// Strict: unknown keys, a version other than 1, an address other than 127.0.0.1, a port outside
// 1..65535, a malformed token or pid are errors naming the field (all of them, one per line).
result<control_endpoint> parse_control_endpoint(std::string_view text);

// Reads and parses `file`; errors start with the file name. A missing file says the daemon is
// probably not running, an unreadable one that the caller lacks the rights to use it. At most
// max_control_endpoint_bytes + 1 bytes are read, so a huge file is refused without being loaded.
result<control_endpoint> load_control_endpoint(os::env& env, const std::filesystem::path& file);

}  // namespace baton::supervisor
