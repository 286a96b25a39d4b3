// How a client (`baton submit`, `status`, ...) finds the daemon, the same way in the per-user and
// the system mode: --socket, else $BATON_SOCKET, else the user's own daemon if its socket exists
// and accepts a connection ($XDG_RUNTIME_DIR/baton/baton.sock; root's own is the system one),
// else the system socket (/run/baton/baton.sock). Pure: the caller fills a socket_search and
// passes a socket_probe that answers the two questions (client_command.cpp asks the real
// socket; tests answer from a table), and owns both.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace baton::supervisor {

// Where the packaged (system) daemon listens (deploy/systemd: RuntimeDirectory=baton).
inline constexpr const char* system_socket_path = "/run/baton/baton.sock";

class socket_probe {
 public:
  virtual ~socket_probe() = default;
  virtual bool exists(const std::filesystem::path& socket) const = 0;
  // A connection to it succeeds (a daemon answers; a stale socket file refuses).
  virtual bool accepts(const std::filesystem::path& socket) const = 0;
};

struct socket_search {
  std::string flag;                       // --socket; empty: not given
  std::optional<std::string> env_socket;  // $BATON_SOCKET; empty counts as unset
  std::filesystem::path own_socket;       // default_socket_path(uid, $XDG_RUNTIME_DIR)
  std::filesystem::path system_socket;    // system_socket_path, or $BATON_SYSTEM_SOCKET
};

struct socket_choice {
  std::filesystem::path path;  // where to connect
  // The places looked at and passed over before `path`, each with why ("no socket there").
  std::vector<std::string> passed;
};

socket_choice discover_socket(const socket_search& search, const socket_probe& probe);

// The error when the chosen socket does not answer either: the connection's own error, then
// every place passed over, so that the user sees everywhere baton looked.
std::string unreachable_message(const socket_choice& choice, const std::string& connect_error);

}  // namespace baton::supervisor
