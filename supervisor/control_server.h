// The control server listens on the supervisor's Unix socket (like Docker's API: curl
// --unix-socket PATH http://localhost/v1/health) and hands every authorised request to the
// daemon's api_handler on the io thread. Security is layered: the socket file is 0660 in a 0750
// folder (optionally owned by a group), and every connection's kernel-reported credentials must be
// our own uid, root, or a member of the allowed group, else it gets 403. The server owns the
// acceptor and a weak list of its sessions; the caller owns the io_context and the handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "protocol/status.h"
#include "supervisor/control_api.h"

namespace boost::asio {
class io_context;
}

namespace baton::supervisor {

// Where `baton serve` listens and `baton` connects when not told otherwise: /run/baton for root
// (systemd's RuntimeDirectory), $XDG_RUNTIME_DIR/baton or /tmp/baton-<uid> for a user daemon.
std::filesystem::path default_socket_path(std::uint32_t uid, const char* xdg_runtime_dir);

struct control_server_options {
  std::filesystem::path socket_path;
  // A group whose members may use the API: the socket (and a folder we create) get this group,
  // and peers whose primary or supplementary groups include it are let in. Unset: our uid and
  // root only. start() fails with a clear error when the group does not exist.
  std::optional<std::string> group;
  std::chrono::milliseconds read_timeout{10000};
  std::size_t max_sessions = 64;  // serving connections; more get 503
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

  // Creates the folder if missing, replaces a stale socket (one nobody answers on), binds, sets
  // modes and group, and starts accepting. Fails if a live daemon answers on the path.
  status start();

  // Closes the acceptor and every session, and removes the socket file if start() created it.
  // Call on the io thread (asio::post it) or while the io_context is not running.
  void stop();

  const std::filesystem::path& socket_path() const;
  // Sessions currently open (serving and refusing). Io thread only, like stop().
  std::size_t session_count() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace baton::supervisor
