#include "supervisor/control_server.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <system_error>
#include <vector>

#include "os/peer_credentials.h"
#include "supervisor/control_session.h"

namespace baton::supervisor {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using local = asio::local::stream_protocol;
using error_code = boost::system::error_code;

std::filesystem::path default_socket_path(std::uint32_t uid, const char* xdg_runtime_dir) {
  if (uid == 0) return "/run/baton/baton.sock";
  if (xdg_runtime_dir != nullptr && *xdg_runtime_dir == '/') {
    return fs::path(xdg_runtime_dir) / "baton" / "baton.sock";
  }
  return fs::path("/tmp") / ("baton-" + std::to_string(uid)) / "baton.sock";
}

namespace {

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

}  // namespace

struct control_server::impl : std::enable_shared_from_this<impl> {
  struct entry {
    std::weak_ptr<control_session> session;
    bool serving = false;
  };

  impl(asio::io_context& io, api_handler& h, control_server_options o)
      : io_(io), handler_(h), options_(std::move(o)), acceptor_(io), retry_timer_(io) {}

  void log(const std::string& message) const {
    if (options_.log) options_.log(message);
  }

  status start() {
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

    error_code ec;
    acceptor_.open(local(), ec);
    if (!ec) acceptor_.bind(local::endpoint(path.string()), ec);
    if (ec) {
      error_code ignored;
      acceptor_.close(ignored);
      return make_error("cannot bind control socket " + path.string() + ": " + ec.message());
    }
    bound_ = true;
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
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
    do_accept();
    return {};
  }

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

  void do_accept() {
    acceptor_.async_accept([self = shared_from_this()](error_code ec, local::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void on_accept(error_code ec, local::socket socket) {
    if (stopped_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning, keep serving the rest.
      log("control socket accept failed: " + ec.message());
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([self = shared_from_this()](error_code tec) {
        if (!tec && !self->stopped_) self->do_accept();
      });
      return;
    }
    try {
      admit(std::move(socket));
    } catch (const std::exception& e) {
      log(std::string("control socket: dropping a connection: ") + e.what());
    }
    do_accept();
  }

  void admit(local::socket socket) {
    const session_limits limits{options_.read_timeout, options_.body_limit, 64 * 1024};
    if (sessions_.size() >= 2 * options_.max_sessions) {
      return;  // flooded: not even a refusal; the socket closes as it goes out of scope
    }
    auto creds = os::get_peer_credentials(socket.native_handle());
    std::optional<api_response> refusal;
    std::uint32_t peer_uid = 0;
    if (!creds) {
      refusal =
          error_response(403, "cannot verify the client's identity: " + creds.error().message);
    } else if (!authorised(*creds)) {
      std::string message = "permission denied: uid " + std::to_string(creds->uid) +
                            " is not the daemon's user (uid " + std::to_string(our_uid_) + ")";
      if (options_.group) message += " and not in group '" + *options_.group + "'";
      log("control socket: refused pid " + std::to_string(creds->pid) + ": " + message);
      refusal = error_response(403, message);
    } else {
      peer_uid = creds->uid;
      if (serving_ >= options_.max_sessions) {
        refusal = error_response(503, "too many connections to the baton daemon (limit " +
                                          std::to_string(options_.max_sessions) + "); try again");
      }
    }
    const std::uint64_t id = next_id_++;
    const bool serving = !refusal;
    auto on_closed = [weak = weak_from_this(), id] {
      if (auto self = weak.lock()) self->forget(id);
    };
    std::shared_ptr<control_session> s =
        serving
            ? control_session::serve(std::move(socket), handler_, peer_uid, limits, on_closed)
            : control_session::refuse(std::move(socket), std::move(*refusal), limits, on_closed);
    sessions_[id] = entry{s, serving};
    if (serving) ++serving_;
  }

  bool authorised(const os::peer_credentials& c) const {
    if (c.uid == our_uid_ || c.uid == 0) return true;
    if (!allowed_gid_) return false;
    return c.gid == *allowed_gid_ ||
           std::find(c.groups.begin(), c.groups.end(), *allowed_gid_) != c.groups.end();
  }

  void forget(std::uint64_t id) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    if (it->second.serving) --serving_;
    sessions_.erase(it);
  }

  void stop() {
    stopped_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    std::vector<std::shared_ptr<control_session>> live;
    for (auto& [id, e] : sessions_) {
      if (auto s = e.session.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) s->close();
    if (bound_) {
      bound_ = false;
      std::error_code fec;
      fs::remove(options_.socket_path, fec);
    }
  }

  asio::io_context& io_;
  api_handler& handler_;
  control_server_options options_;
  local::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  std::optional<std::uint32_t> allowed_gid_;
  std::uint32_t our_uid_ = 0;
  std::map<std::uint64_t, entry> sessions_;
  std::size_t serving_ = 0;
  std::uint64_t next_id_ = 0;
  bool bound_ = false;
  bool stopped_ = false;
};

control_server::control_server(asio::io_context& io, api_handler& handler,
                               control_server_options options)
    : impl_(std::make_shared<impl>(io, handler, std::move(options))) {}

control_server::~control_server() { impl_->stop(); }

status control_server::start() { return impl_->start(); }

void control_server::stop() { impl_->stop(); }

const std::filesystem::path& control_server::socket_path() const {
  return impl_->options_.socket_path;
}

std::size_t control_server::session_count() const { return impl_->sessions_.size(); }

}  // namespace baton::supervisor
