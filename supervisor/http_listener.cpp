#include "supervisor/http_listener.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <charconv>

#include "os/exclusive_address.h"
#include "supervisor/dashboard_routes.h"
#include "supervisor/web_server.h"

namespace baton::supervisor {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

result<http_listen_address> parse_http_listen(std::string_view text) {
  // Appended, not "'" + text + "'": GCC 12's -Wrestrict misfires on that concatenation.
  std::string shown = "'";
  shown.append(text);
  shown += '\'';
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == text.size()) {
    return make_error("http_listen: expected \"127.0.0.1:PORT\", got " + shown + " (no port)");
  }
  std::string_view host = text.substr(0, colon);
  const auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [ptr, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    return make_error("http_listen: bad port in " + shown + ": expected 0 to 65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string h(host == "localhost" ? "127.0.0.1" : host);
  boost::system::error_code bad;
  const auto addr = asio::ip::make_address(h, bad);
  if (bad) {
    return make_error("http_listen: " + shown +
                      " does not start with an IP address; use \"127.0.0.1:PORT\"");
  }
  if (!addr.is_loopback()) {
    return make_error("http_listen: " + h +
                      " is not a loopback address; the read-only listener serves this machine "
                      "only (use 127.0.0.1, and a reverse proxy to go further)");
  }
  return http_listen_address{h, static_cast<std::uint16_t>(port)};
}

struct http_listener::impl {
  impl(asio::io_context& io_, api_handler& h, http_listen_address a,
       std::function<void(const std::string&)> l, std::string t)
      : io(io_),
        router(std::make_shared<dashboard_router>(h, t)),
        address(std::move(a)),
        log(std::move(l)),
        token(std::move(t)) {}
  asio::io_context& io;
  // Shared with the sessions' handler: one that outlives the listener by a handler still finds it.
  std::shared_ptr<dashboard_router> router;
  http_listen_address address;
  std::function<void(const std::string&)> log;
  std::string token;
  std::shared_ptr<web_server> server;
  std::uint16_t port = 0;
};

http_listener::http_listener(asio::io_context& io, api_handler& handler,
                             http_listen_address address,
                             std::function<void(const std::string&)> log,
                             std::string dashboard_token)
    : impl_(std::make_unique<impl>(io, handler, std::move(address), std::move(log),
                                   std::move(dashboard_token))) {}

http_listener::~http_listener() { stop(); }

status http_listener::start() {
  auto& m = *impl_;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(m.address.host, ec);
  if (ec || !addr.is_loopback()) {  // parse_http_listen refuses these; a hand-made one too
    return make_error("http_listen: " + m.address.host + " is not a loopback address");
  }
  const std::string where = url();
  tcp::acceptor acceptor(m.io);
  const tcp::endpoint ep(addr, m.address.port);
  acceptor.open(ep.protocol(), ec);
  if (ec) return make_error("http_listen: cannot open a TCP socket: " + ec.message());
  if (auto s = os::claim_address_exclusively(acceptor.native_handle()); !s) {
    return with_context("http_listen", s.error());
  }
  acceptor.bind(ep, ec);
  if (ec) return make_error("http_listen: cannot bind " + where + ": " + ec.message());
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error("http_listen: cannot listen on " + where + ": " + ec.message());
  m.port = acceptor.local_endpoint(ec).port();
  if (ec) return make_error("http_listen: cannot read the bound port: " + ec.message());
  // Scrapers and dashboard tabs are few; the limits only bound what a local flood can hold.
  m.server = std::make_shared<web_server>(
      std::move(acceptor), [router = m.router](const web_request& r) { return router->handle(r); },
      web_server_limits{}, m.log);
  m.server->start();
  return {};
}

void http_listener::stop() {
  if (impl_ && impl_->server) {
    impl_->server->stop();
    impl_->server.reset();
  }
}

std::uint16_t http_listener::port() const { return impl_->port; }

std::string http_listener::url() const {
  const auto& a = impl_->address;
  const auto port = impl_->port != 0 ? impl_->port : a.port;
  std::string out = "http://";
  const bool v6 = a.host.find(':') != std::string::npos;
  if (v6) out += '[';
  out += a.host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

std::string http_listener::dashboard_url() const {
  return impl_->token.empty() ? std::string() : supervisor::dashboard_url(url(), impl_->token);
}

}  // namespace baton::supervisor
