// The control API on loopback TCP (Windows): bound to 127.0.0.1 only, the port reserved against
// other processes (os/exclusive_address.h), and every request must carry the bearer token this
// daemon drew at start. The token and port go to the endpoint file, whose access control
// (os/private_file.h) is what decides who may use the API: reading the file is the credential.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <system_error>

#include "os/env.h"
#include "os/exclusive_address.h"
#include "os/private_file.h"
#include "os/system.h"
#include "supervisor/control_accept_loop.h"
#include "supervisor/control_client.h"
#include "supervisor/control_endpoint.h"
#include "supervisor/control_listener.h"
#include "supervisor/control_token.h"

namespace baton::supervisor {

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

class tcp_listener final : public control_listener {
 public:
  tcp_listener(asio::io_context& io, api_handler& handler, const control_server_options& o)
      : io_(io), handler_(handler), options_(o) {}

  ~tcp_listener() override { stop(); }

  status start() override {
    const fs::path& file = options_.socket_path;
    if (file.empty()) return make_error("control endpoint file path is empty");
    if (auto s = prepare_folder(file.parent_path()); !s) return s;
    if (auto s = check_not_live(file); !s) return s;
    auto token = make_control_token();
    if (!token) return token.error();

    tcp::acceptor acceptor(io_);
    error_code ec;
    const tcp::endpoint where(asio::ip::address_v4::loopback(), options_.port);
    acceptor.open(tcp::v4(), ec);
    if (ec) return make_error("cannot open the control API's TCP socket: " + ec.message());
    if (auto s = os::claim_address_exclusively(acceptor.native_handle()); !s) return s;
    acceptor.bind(where, ec);
    if (ec) {
      return make_error("cannot bind the control API to 127.0.0.1:" +
                        std::to_string(options_.port) + ": " + ec.message() +
                        (options_.port != 0 ? " (choose another control_port, or 0 for any)" : ""));
    }
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return make_error("cannot listen on 127.0.0.1: " + ec.message());
    port_ = acceptor.local_endpoint(ec).port();
    if (ec) return make_error("cannot read the control API's port: " + ec.message());

    endpoint_.port = port_;
    endpoint_.token = std::move(*token);
    endpoint_.pid = os::current_pid();
    // Written before accepting, after binding: a client that reads the file finds a listener.
    if (auto s = os::write_private_file(file, render_control_endpoint(endpoint_), options_.group);
        !s) {
      return with_context("control endpoint file", s.error());
    }
    written_ = true;
    uid_ = os::current_uid();
    const session_limits limits{options_.read_timeout, options_.header_timeout, options_.body_limit,
                                64 * 1024};
    const connection_limits caps{options_.max_sessions, options_.max_sessions_per_uid};
    // The connection proves nothing: every request must show the token (control_session).
    // Every connection is "our" uid until its token says more, so the per-uid limit is the
    // whole bucket; the limits still evict idle connections for new ones.
    auto admit = [this](tcp::socket&) {
      control_admission a;
      a.auth.peer_uid = uid_;
      a.auth.bearer_token = endpoint_.token;
      a.uid = uid_;
      a.privileged = true;
      return a;
    };
    loop_ = std::make_shared<control_accept_loop<tcp>>(std::move(acceptor), handler_, limits, caps,
                                                       options_.log, std::move(admit));
    loop_->start();
    return {};
  }

  void stop() override {
    if (loop_) loop_->stop();
    if (written_) {
      written_ = false;
      // Only our own file: a daemon started after us (we were presumed dead) owns a new one.
      auto current = load_control_endpoint(os::env::default_env(), options_.socket_path);
      if (current && tokens_equal(current->token, endpoint_.token)) {
        std::error_code fec;
        fs::remove(options_.socket_path, fec);
      }
    }
  }

  std::size_t session_count() const override { return loop_ ? loop_->session_count() : 0; }

  std::string description() const override {
    return "127.0.0.1:" + std::to_string(port_) + " (endpoint file " +
           options_.socket_path.string() + ")";
  }

  std::uint16_t port() const override { return port_; }

 private:
  // The endpoint file carries its own access control, so an existing folder (ProgramData) is
  // used as it is; a missing one is created with the parent's inherited access.
  static status prepare_folder(const fs::path& dir) {
    if (dir.empty()) return {};
    std::error_code fec;
    if (fs::exists(dir, fec)) {
      if (!fs::is_directory(dir, fec))
        return make_error(dir.string() + " exists and is not a folder");
      return {};
    }
    fs::create_directories(dir, fec);
    if (fec) return make_error("cannot create folder " + dir.string() + ": " + fec.message());
    return {};
  }

  // An endpoint file outlives a daemon that was killed. It is stale unless a baton daemon
  // answers a health check with its token: the port alone may have been reused by anything.
  status check_not_live(const fs::path& file) {
    std::error_code fec;
    if (!fs::exists(file, fec)) return {};
    auto old = load_control_endpoint(os::env::default_env(), file);
    if (!old) {
      // Garbage, or written by an account we cannot read as: replacing it fails in the latter
      // case with the OS's reason, which is the clearer message.
      if (options_.log) options_.log("replacing control endpoint file: " + old.error().message);
      return {};
    }
    auto r = control_client::call_tcp(*old, "endpoint file " + file.string(), "GET", "/v1/health",
                                      nullptr, std::chrono::seconds(2));
    if (r && r->status == 200) {
      return make_error("another baton daemon (pid " + std::to_string(old->pid) +
                        ") is listening on 127.0.0.1:" + std::to_string(old->port) +
                        " (endpoint file " + file.string() + ")");
    }
    return {};
  }

  asio::io_context& io_;
  api_handler& handler_;
  const control_server_options& options_;
  std::shared_ptr<control_accept_loop<tcp>> loop_;
  control_endpoint endpoint_;
  std::uint16_t port_ = 0;
  std::uint32_t uid_ = 0;
  bool written_ = false;
};

}  // namespace

std::unique_ptr<control_listener> make_tcp_listener(asio::io_context& io, api_handler& handler,
                                                    const control_server_options& options) {
  return std::make_unique<tcp_listener>(io, handler, options);
}

}  // namespace baton::supervisor
