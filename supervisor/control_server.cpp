#include "supervisor/control_server.h"

#include "os/machine_dir.h"
#include "os/peer_credentials.h"
#include "supervisor/control_listener.h"

namespace baton::supervisor {

namespace fs = std::filesystem;

control_transport native_control_transport() {
  return os::peer_credentials_supported ? control_transport::unix_socket
                                        : control_transport::tcp_loopback;
}

std::filesystem::path default_socket_path(std::uint32_t uid, const char* xdg_runtime_dir) {
  if (native_control_transport() == control_transport::tcp_loopback) {
    // One machine-wide place, like Docker's \\.\pipe\docker_engine: an Administrator's `baton`
    // finds the service's daemon without flags. The file's DACL, not the folder, guards it.
    return os::machine_dir() / "control-endpoint.json";
  }
  if (uid == 0) return "/run/baton/baton.sock";
  if (xdg_runtime_dir != nullptr && *xdg_runtime_dir == '/') {
    return fs::path(xdg_runtime_dir) / "baton" / "baton.sock";
  }
  return fs::path("/tmp") / ("baton-" + std::to_string(uid)) / "baton.sock";
}

control_listener::~control_listener() = default;

control_server::control_server(boost::asio::io_context& io, api_handler& handler,
                               control_server_options options)
    : options_(std::move(options)),
      listener_(options_.transport == control_transport::tcp_loopback
                    ? make_tcp_listener(io, handler, options_)
                    : make_unix_listener(io, handler, options_)) {}

control_server::~control_server() { listener_->stop(); }

status control_server::start() { return listener_->start(); }

void control_server::stop() { listener_->stop(); }

const std::filesystem::path& control_server::socket_path() const { return options_.socket_path; }

std::string control_server::description() const { return listener_->description(); }

std::uint16_t control_server::port() const { return listener_->port(); }

std::size_t control_server::session_count() const { return listener_->session_count(); }

}  // namespace baton::supervisor
