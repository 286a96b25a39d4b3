// A small HTTP/1.1 server for the read-only loopback listener (http_listener.h): it accepts on a
// bound acceptor, reads GET requests under a deadline and a header size limit, and hands each to
// a pure handler (web_request in, web_response out: dashboard_routes.h), writing back its status,
// headers and body, keeping the connection alive while the client asks for it. It is not the
// control API's session (control_session.h): what it serves is static files and read-only
// answers with headers of their own (Content-Security-Policy and the like), and it neither
// knows nor needs a peer's identity; a token, where a route needs one, is the handler's business.
//
// Bounded like the control socket, simpler: at most `max_sessions` connections; past that the
// connection that has waited longest for a request is closed to make room (an idle browser tab
// never keeps a scraper out), and when none is idle the newcomer is closed unanswered. The server
// owns its acceptor; sessions own themselves through their pending operations and the server
// keeps weak references to close them at stop(). Everything runs on the io_context's thread.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton::supervisor {

struct web_request {
  std::string method;                        // "GET"
  std::string target;                        // origin-form: "/v1/jobs?token=..."
  std::optional<std::string> authorization;  // the Authorization header, when sent
};

struct web_response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones, sent as given
};

using web_handler = std::function<web_response(const web_request&)>;

struct web_server_limits {
  std::chrono::milliseconds read_timeout{10000};   // one whole request, and one answer's write
  std::chrono::milliseconds header_timeout{5000};  // an idle connection is closed after this
  std::size_t header_limit = 16 * 1024;            // GETs only: no body is accepted at all
  std::size_t max_sessions = 64;
};

class web_server : public std::enable_shared_from_this<web_server> {
 public:
  using log_fn = std::function<void(const std::string&)>;

  // `acceptor` is bound and listening. The handler runs on the io thread and must not block; an
  // exception from it is answered 500, never let out of the Asio handler.
  web_server(boost::asio::ip::tcp::acceptor acceptor, web_handler handler, web_server_limits limits,
             log_fn log);
  ~web_server();

  void start();  // once
  void stop();   // closes the acceptor and every session; io thread (or io_context idle)
  std::size_t session_count() const;

  // Internal: sessions report here.
  struct session_base;

 private:
  void do_accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);
  bool make_room();

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  web_handler handler_;
  web_server_limits limits_;
  log_fn log_;
  std::vector<std::weak_ptr<session_base>> sessions_;
  bool stopped_ = false;
};

}  // namespace baton::supervisor
