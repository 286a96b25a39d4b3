// The control API on a Unix socket (Linux): access is the socket file's mode and group plus the
// kernel-reported credentials of every peer (SO_PEERCRED), so no token is needed.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <limits>
#include <optional>
#include <system_error>

#include "os/peer_credentials.h"
#include "os/socket_file.h"
#include "supervisor/control_accept_loop.h"
#include "supervisor/control_listener.h"

namespace baton::supervisor {

namespace {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using error_code = boost::system::error_code;

class unix_listener final : public control_listener {
 public:
  unix_listener(asio::io_context& io, api_handler& handler, const control_server_options& o)
      : io_(io), handler_(handler), options_(o) {}

  ~unix_listener() override { stop(); }

  status start() override {
    if (auto s = os::check_socket_path_length(options_.socket_path); !s) return s;
    const auto& path = options_.socket_path;
    if (options_.group) {
      auto gid = os::find_group(*options_.group);
      if (!gid) {
        return make_error("control socket group: " + gid.error().message +
                          " (create it with groupadd, or start without a group)");
      }
      allowed_gid_ = *gid;
    }
    if (auto s = os::prepare_socket_folder(path.parent_path(), allowed_gid_); !s) return s;
    if (auto s = os::remove_stale_socket(path); !s) return s;

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
    if (auto s = os::set_socket_access(path, allowed_gid_); !s) {
      stop();
      return s;
    }
    our_uid_ = os::current_uid();
    const session_limits limits{options_.read_timeout, options_.header_timeout, options_.body_limit,
                                64 * 1024};
    const connection_limits caps{options_.max_sessions, options_.max_sessions_per_uid};
    loop_ = std::make_shared<control_accept_loop<local>>(
        std::move(acceptor), handler_, limits, caps, options_.log,
        [this](local::socket& s) { return admit(s); });
    loop_->start();
    return {};
  }

  void stop() override {
    if (loop_) loop_->stop();
    if (bound_) {
      bound_ = false;
      os::remove_socket_file(options_.socket_path);
    }
  }

  std::size_t session_count() const override { return loop_ ? loop_->session_count() : 0; }

  std::string description() const override {
    return "unix socket " + options_.socket_path.string();
  }

  std::uint16_t port() const override { return 0; }

 private:
  control_admission admit(local::socket& socket) {
    control_admission out;
    auto creds = os::get_peer_credentials(socket.native_handle());
    // Unknown peers share one bucket of their own; root and our uid are the owner's.
    out.uid = creds ? creds->uid : std::numeric_limits<std::uint32_t>::max();
    out.privileged = creds && (creds->uid == our_uid_ || creds->uid == 0);
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
      out.auth.peer_gid = creds->gid;
      out.auth.peer_groups = creds->groups;
      out.auth.privileged = out.privileged;
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
