// The daemon's read-only web listener: loopback TCP at the settings' `http_listen`
// ("127.0.0.1:PORT", off unless set), for what is safe to offer on this machine: `GET /metrics`
// for Prometheus, token-free, and, when given a dashboard token, the web dashboard and the
// control API's read-only calls it polls, behind that token (dashboard_routes.h has the routes).
// It never serves a route that changes anything: the control socket, with its access checks,
// stays the only door to that. Addresses that are not loopback are refused with an error naming
// the field, so no setting can put the listener on a network. The daemon owns the listener; the
// listener owns its web_server (web_server.h) and router, and calls the daemon's handler on the
// io thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "supervisor/control_api.h"

namespace boost::asio {
class io_context;
}

namespace baton::supervisor {

struct http_listen_address {
  std::string host;        // a loopback address as written: "127.0.0.1", "::1"
  std::uint16_t port = 0;  // 0: any free port, shown at start
  friend bool operator==(const http_listen_address&, const http_listen_address&) = default;
};

// "127.0.0.1:9464", "[::1]:9464", "localhost:9464" (read as 127.0.0.1). Errors start with
// "http_listen: " and say what is wrong: no port, a bad port, a host that is not loopback.
result<http_listen_address> parse_http_listen(std::string_view text);

class http_listener {
 public:
  // An empty `dashboard_token` serves /metrics only.
  http_listener(boost::asio::io_context& io, api_handler& handler, http_listen_address address,
                std::function<void(const std::string&)> log, std::string dashboard_token = {});
  ~http_listener();  // stop()s
  http_listener(const http_listener&) = delete;
  http_listener& operator=(const http_listener&) = delete;

  // Binds and starts accepting. Fails naming http_listen when the address cannot be bound.
  status start();
  // Closes the acceptor and every session. Io thread, or while the io_context is not running.
  void stop();
  std::uint16_t port() const;  // the bound port after start()
  // "http://127.0.0.1:9464", for the start-up line.
  std::string url() const;
  // "http://127.0.0.1:9464/?token=...", the page with its token; empty when the dashboard is off.
  std::string dashboard_url() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::supervisor
