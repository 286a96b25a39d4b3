// The control API on a Unix socket (Linux): access is the socket file's mode and group plus the
// kernel-reported credentials of every peer (SO_PEERCRED), so no token is needed.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <optional>
#include <system_error>

#include "os/peer_credentials.h"
#include "supervisor/control_accept_loop.h"
#include "supervisor/control_listener.h"

namespace baton::supervisor {

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using local = asio::local::stream_protocol;
using error_code = boost::system::error_code;

// sockaddr_un::sun_path is 108 bytes on Linux (104 on the BSDs), including the terminating NUL.
constexpr std::size_t max_socket_path = 107;

status check_path_length(const fs::path& path) {
  if (path.native().size() > max_socket_path) {
    return make_error("socket path " + path.string() + " is " +
                      std::to_string(path.native().size()) + " bytes; Unix sockets allow at most " +
                      std::to_string(max_socket_path));
  }
  if (path.native().empty()) return make_error("socket path is empty");
  return {};
}

// A socket file outlives a daemon that was killed. It is ours to replace only if nobody answers
// on it: connected (or a full backlog, which also means a listener) is a live daemon.
status remove_if_stale(const fs::path& path) {
  std::error_code fec;
  const auto st = fs::symlink_status(path, fec);
  if (fec || !fs::exists(st)) return {};
  if (!fs::is_socket(st)) {
    return make_error(path.string() + " exists and is not a socket; not removing it");
  }
  asio::io_context probe_io;
  local::socket probe(probe_io);
  error_code ec;
  probe.open(local(), ec);
  if (!ec) probe.non_blocking(true, ec);
  if (!ec) probe.connect(local::endpoint(path.string()), ec);
  if (!ec || ec == asio::error::would_block || ec == asio::error::try_again ||
      ec == asio::error::in_progress) {
    return make_error("another baton daemon is listening on " + path.string());
  }
  if (ec != asio::error::connection_refused) {
    return make_error("cannot check whether " + path.string() + " is in use: " + ec.message());
  }
  if (!fs::remove(path, fec) && fec) {
    return make_error("cannot remove stale socket " + path.string() + ": " + fec.message());
  }
  return {};
}

class unix_listener final : public control_listener {
 public:
  unix_listener(asio::io_context& io, api_handler& handler, const control_server_options& o)
      : io_(io), handler_(handler), options_(o) {}

  ~unix_listener() override { stop(); }

  status start() override {
    if (auto s = check_path_length(options_.socket_path); !s) return s;
    const fs::path& path = options_.socket_path;
    if (options_.group) {
      auto gid = os::find_group(*options_.group);
      if (!gid) {
        return make_error("control socket group: " + gid.error().message +
                          " (create it with groupadd, or start without a group)");
      }
      allowed_gid_ = *gid;
    }
    if (auto s = prepare_folder(path.parent_path()); !s) return s;
    if (auto s = remove_if_stale(path); !s) return s;

    local::acceptor acceptor(io_);
    error_code ec;
    acceptor.open(local(), ec);
    if (!ec) acceptor.bind(local::endpoint(path.string()), ec);
    if (ec) {
      error_code ignored;
      acceptor.close(ignored);
      return make_error("cannot bind control socket " + path.string() + ": " + ec.message());
    }
    bound_ = true;
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      stop();
      return make_error("cannot listen on " + path.string() + ": " + ec.message());
    }
    std::error_code fec;
    fs::permissions(path,
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                        fs::perms::group_write,
                    fs::perm_options::replace, fec);
    if (fec) {
      stop();
      return make_error("cannot set mode 0660 on " + path.string() + ": " + fec.message());
    }
    if (allowed_gid_) {
      if (auto s = os::set_file_group(path, *allowed_gid_); !s) {
        stop();
        return s;
      }
    }
    our_uid_ = os::current_uid();
    const session_limits limits{options_.read_timeout, options_.body_limit, 64 * 1024};
    loop_ = std::make_shared<control_accept_loop<local>>(
        std::move(acceptor), handler_, limits, options_.max_sessions, options_.log,
        [this](local::socket& s) { return admit(s); });
    loop_->start();
    return {};
  }

  void stop() override {
    if (loop_) loop_->stop();
    if (bound_) {
      bound_ = false;
      std::error_code fec;
      fs::remove(options_.socket_path, fec);
    }
  }

  std::size_t session_count() const override { return loop_ ? loop_->session_count() : 0; }

  std::string description() const override {
    return "unix socket " + options_.socket_path.string();
  }

  std::uint16_t port() const override { return 0; }

 private:
  // A folder we create is 0750 (and gets the group), so only its owner and group can even reach
  // the socket. An existing folder is left alone: it may be /run or a user's runtime dir.
  status prepare_folder(const fs::path& dir) {
    if (dir.empty()) return {};
    std::error_code fec;
    if (fs::exists(dir, fec)) {
      if (!fs::is_directory(dir, fec)) {
        return make_error(dir.string() + " exists and is not a folder");
      }
      return {};
    }
    fs::create_directories(dir, fec);
    if (fec) return make_error("cannot create folder " + dir.string() + ": " + fec.message());
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                    fs::perm_options::replace, fec);
    if (fec) return make_error("cannot set mode 0750 on " + dir.string() + ": " + fec.message());
    if (allowed_gid_) return os::set_file_group(dir, *allowed_gid_);
    return {};
  }

  control_admission admit(local::socket& socket) {
    control_admission out;
    auto creds = os::get_peer_credentials(socket.native_handle());
    if (!creds) {
      out.refusal =
          error_response(403, "cannot verify the client's identity: " + creds.error().message);
    } else if (!authorised(*creds)) {
      std::string message = "permission denied: uid " + std::to_string(creds->uid) +
                            " is not the daemon's user (uid " + std::to_string(our_uid_) + ")";
      if (options_.group) message += " and not in group '" + *options_.group + "'";
      if (options_.log) {
        options_.log("control socket: refused pid " + std::to_string(creds->pid) + ": " + message);
      }
      out.refusal = error_response(403, message);
    } else {
      out.auth.peer_uid = creds->uid;
    }
    return out;
  }

  bool authorised(const os::peer_credentials& c) const {
    if (c.uid == our_uid_ || c.uid == 0) return true;
    if (!allowed_gid_) return false;
    return c.gid == *allowed_gid_ ||
           std::find(c.groups.begin(), c.groups.end(), *allowed_gid_) != c.groups.end();
  }

  asio::io_context& io_;
  api_handler& handler_;
  const control_server_options& options_;
  std::shared_ptr<control_accept_loop<local>> loop_;
  std::optional<std::uint32_t> allowed_gid_;
  std::uint32_t our_uid_ = 0;
  bool bound_ = false;
};

}  // namespace

std::unique_ptr<control_listener> make_unix_listener(asio::io_context& io, api_handler& handler,
                                                     const control_server_options& options) {
  return std::make_unique<unix_listener>(io, handler, options);
}

}  // namespace baton::supervisor
