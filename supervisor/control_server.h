// The control server listens for the supervisor's control API and hands every authorised request
// to the daemon's api_handler on the io thread. Two transports (protocol/README.md says why):
// - unix_socket (Linux, like Docker's API: curl --unix-socket PATH http://localhost/v1/health).
//   The socket file is 0660 in a 0750 folder (optionally owned by a group), and every
//   connection's kernel-reported credentials must be our own uid, root, or a member of the
//   allowed group, else it gets 403.
// - tcp_loopback (Windows, where there are no peer credentials and wine has no AF_UNIX): bound to
//   127.0.0.1 only, with a fresh 256-bit token written to an endpoint file only Administrators,
//   SYSTEM, our account and the group can read; a request without that token gets 401.
// The server owns its listener (control_listener.h); the caller owns the io_context and handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "supervisor/control_api.h"

namespace boost::asio {
class io_context;
}

namespace baton::supervisor {

enum class control_transport { unix_socket, tcp_loopback };

// This platform's transport: unix_socket where the OS reports peer credentials, else
// tcp_loopback (Windows).
control_transport native_control_transport();

// Where `baton serve` listens and `baton` connects when not told otherwise. Unix socket: /run/baton
// for root (systemd's RuntimeDirectory), $XDG_RUNTIME_DIR/baton or /tmp/baton-<uid> for a user
// daemon. Windows: the endpoint file %ProgramData%\baton\control-endpoint.json (arguments unused).
std::filesystem::path default_socket_path(std::uint32_t uid, const char* xdg_runtime_dir);

class control_listener;

struct control_server_options {
  control_transport transport = native_control_transport();
  // unix_socket: the socket. tcp_loopback: the endpoint file (control_endpoint.h).
  std::filesystem::path socket_path;
  // tcp_loopback only: the port on 127.0.0.1; 0 lets the OS pick a free one.
  std::uint16_t port = 0;
  // A group whose members may use the API. Unix socket: the socket (and a folder we create) get
  // this group, and peers whose primary or supplementary groups include it are let in. TCP: the
  // group may read the endpoint file. Unset: our account and root/Administrators/SYSTEM only.
  // start() fails with a clear error when the group does not exist.
  std::optional<std::string> group;
  std::chrono::milliseconds read_timeout{10000};  // one whole request, or one answer
  // From connecting (or the previous answer) to the end of a request's header; idle connections
  // are closed after it.
  std::chrono::milliseconds header_timeout{5000};
  // Connections at once, all together and per uid (control_accept_loop.h): a new one past a limit
  // takes the slot of the longest-idle one of its uid, or of the biggest holder; unprivileged
  // uids together get max_sessions - max_sessions_per_uid, the rest is kept for the daemon's own
  // uid and root.
  std::size_t max_sessions = 256;
  std::size_t max_sessions_per_uid = 32;
  std::size_t body_limit = max_request_body_bytes;
  // Diagnostics (refused peers, accept failures). Called on the io thread; may be empty.
  std::function<void(const std::string&)> log;
};

class control_server {
 public:
  control_server(boost::asio::io_context& io, api_handler& handler, control_server_options options);
  ~control_server();  // stop()s
  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  // Creates the folder if missing, replaces a stale socket or endpoint file (one nobody answers
  // on), binds, sets access (modes and group; the endpoint file's DACL), and starts accepting.
  // Fails if a live daemon answers on the path.
  status start();

  // Closes the acceptor and every session, and removes the socket or endpoint file if start()
  // created it. Call on the io thread (asio::post it) or while the io_context is not running.
  void stop();

  const std::filesystem::path& socket_path() const;
  // For logs: "unix socket /run/baton/baton.sock" or "127.0.0.1:50123 (endpoint file ...)".
  std::string description() const;
  // tcp_loopback after start(): the bound port. 0 otherwise.
  std::uint16_t port() const;
  // Sessions currently open (serving and refusing). Io thread only, like stop().
  std::size_t session_count() const;

 private:
  control_server_options options_;
  std::unique_ptr<control_listener> listener_;
};

}  // namespace baton::supervisor
