#include "supervisor/control_session.h"

#include <boost/asio/dispatch.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "supervisor/control_token.h"

namespace baton::supervisor {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

control_session::~control_session() = default;

namespace {

bool is_http_parse_error(const error_code& ec) {
  return ec.category() == make_error_code(http::error::bad_method).category();
}

// The api_response on the wire: JSON plus a newline (for curl users), never throwing on bad
// UTF-8 in a message the daemon built from user input.
std::string render(const api_response& r) {
  const auto& body = r.body.is_null() ? nlohmann::json::object() : r.body;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

template <class Protocol>
class http_session final : public control_session,
                           public std::enable_shared_from_this<http_session<Protocol>> {
 public:
  using socket_type = typename Protocol::socket;
  using stream_type = beast::basic_stream<Protocol>;

  http_session(socket_type socket, api_handler* handler, std::optional<api_response> refusal,
               session_auth auth, const session_limits& limits, std::function<void()> on_closed)
      : stream_(std::move(socket)),
        handler_(handler),
        refusal_(std::move(refusal)),
        auth_(std::move(auth)),
        limits_(limits),
        on_closed_(std::move(on_closed)) {}

  ~http_session() override {
    if (on_closed_) {
      try {
        on_closed_();
      } catch (...) {  // a destructor must not throw; the server's bookkeeping cannot fail anyway
      }
    }
  }

  void run() {
    // Start on the stream's executor: the caller may be an accept handler on the same strand-less
    // io_context, but going through dispatch keeps the threading rule in one place.
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&http_session::do_read, this->shared_from_this()));
  }

  void close() override {
    waiting_since_.reset();
    error_code ignored;
    stream_.socket().close(ignored);
  }

  std::optional<std::chrono::steady_clock::time_point> waiting_since() const override {
    return waiting_since_;
  }

  bool has_unread_bytes() const override {
    error_code ec;
    const auto n = stream_.socket().available(ec);
    return !ec && n > 0;
  }

  void evict(api_response why) override {
    if (!waiting_since_) return;
    waiting_since_.reset();
    eviction_ = std::move(why);
    stream_.cancel();  // the header read ends with operation_aborted, then we answer
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(limits_.body_limit);
    parser_->header_limit(static_cast<std::uint32_t>(limits_.header_limit));
    const auto now = std::chrono::steady_clock::now();
    waiting_since_ = now;
    request_deadline_ = now + limits_.read_timeout;
    stream_.expires_after(std::min(limits_.header_timeout, limits_.read_timeout));
    http::async_read_header(
        stream_, buffer_, *parser_,
        beast::bind_front_handler(&http_session::on_header, this->shared_from_this()));
  }

  void on_header(error_code ec, std::size_t n) {
    waiting_since_.reset();
    if (eviction_) return answer(*eviction_, false, 11);
    // A refusal needs no body: answered as soon as the header is in, so a client that is slow
    // to send (or never sends) its body still reads why.
    if (!ec && refusal_) return answer(*refusal_, false, parser_->get().version());
    if (ec || parser_->is_done()) return on_read(ec, n);
    // The body (if any) under what is left of the whole request's deadline.
    stream_.expires_at(request_deadline_);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&http_session::on_read, this->shared_from_this()));
  }

  void on_read(error_code ec, std::size_t) {
    try {
      if (eviction_) return answer(*eviction_, false, 11);
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::operation_aborted) {
        return shut_down();  // client done, stalled, or the server is stopping
      }
      if (ec == http::error::body_limit) {
        return answer(error_response(413, "request body exceeds the limit of " +
                                              std::to_string(limits_.body_limit) + " bytes"),
                      false, 11);
      }
      if (ec == http::error::header_limit) {
        return answer(error_response(413, "request header exceeds the limit of " +
                                              std::to_string(limits_.header_limit) + " bytes"),
                      false, 11);
      }
      if (ec && is_http_parse_error(ec) && ec != http::error::partial_message) {
        return answer(error_response(400, "malformed HTTP request: " + ec.message()), false, 11);
      }
      if (ec) return shut_down();  // reset, partial message at EOF: nobody left to answer

      auto& request = parser_->get();
      if (refusal_) return answer(*refusal_, false, request.version());
      if (!auth_.bearer_token.empty()) {
        const auto field = request.find(http::field::authorization);
        std::optional<std::string_view> presented;
        if (field != request.end()) presented = std::string_view(field->value());
        if (auto denied = check_bearer(presented, auth_.bearer_token)) {
          // Closed after the answer: a client guessing tokens pays a connection per guess.
          return answer(error_response(*denied), false, request.version());
        }
      }
      const bool keep_alive = request.keep_alive();
      const unsigned version = request.version();
      api_request req{std::string(request.method_string()),
                      std::string(request.target()),
                      std::move(request.body()),
                      auth_.peer_uid,
                      auth_.peer_gid,
                      auth_.peer_groups};
      answer(dispatch(req), keep_alive, version);
    } catch (const std::exception&) {
      shut_down();  // out of memory or similar: drop this client, keep the daemon
    }
  }

  api_response dispatch(const api_request& req) {
    auto call = parse_api_request(req);
    if (!call) return error_response(call.error());
    try {
      return handler_->handle(*call, api_caller{auth_.peer_uid, auth_.privileged});
    } catch (const std::exception& e) {
      return error_response(
          500, std::string("internal error in ") + std::string(call_name(*call)) + ": " + e.what());
    } catch (...) {
      return error_response(500, "internal error in " + std::string(call_name(*call)));
    }
  }

  void answer(const api_response& r, bool keep_alive, unsigned version) {
    response_ = {};
    response_.version(version == 10 ? 10 : 11);
    const int status = r.status >= 100 && r.status <= 599 ? r.status : 500;
    response_.result(static_cast<unsigned>(status));
    response_.set(http::field::server, "baton");
    response_.set(http::field::content_type,
                  r.content_type.empty() ? std::string("application/json") : r.content_type);
    if (status == 401) response_.set(http::field::www_authenticate, "Bearer realm=\"baton\"");
    response_.keep_alive(keep_alive);
    response_.body() = r.content_type.empty() ? render(r) : r.text;
    response_.prepare_payload();
    stream_.expires_after(limits_.read_timeout);
    http::async_write(stream_, response_,
                      beast::bind_front_handler(&http_session::on_write, this->shared_from_this()));
  }

  void on_write(error_code ec, std::size_t) {
    if (ec || !response_.keep_alive() || eviction_) return shut_down();
    do_read();
  }

  void shut_down() {
    error_code ignored;
    stream_.socket().shutdown(socket_type::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  stream_type stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;  // alive until async_write completes
  api_handler* handler_;
  std::optional<api_response> refusal_;
  std::optional<api_response> eviction_;  // set by evict(): answered instead of a request
  std::optional<std::chrono::steady_clock::time_point> waiting_since_;
  std::chrono::steady_clock::time_point request_deadline_;
  session_auth auth_;
  session_limits limits_;
  std::function<void()> on_closed_;
};

template <class Protocol>
std::shared_ptr<control_session> start_serving(typename Protocol::socket socket,
                                               api_handler& handler, session_auth auth,
                                               const session_limits& limits,
                                               std::function<void()> on_closed) {
  auto s = std::make_shared<http_session<Protocol>>(std::move(socket), &handler, std::nullopt,
                                                    std::move(auth), limits, std::move(on_closed));
  s->run();
  return s;
}

template <class Protocol>
std::shared_ptr<control_session> start_refusing(typename Protocol::socket socket,
                                                api_response refusal, const session_limits& limits,
                                                std::function<void()> on_closed) {
  auto s = std::make_shared<http_session<Protocol>>(std::move(socket), nullptr, std::move(refusal),
                                                    session_auth{}, limits, std::move(on_closed));
  s->run();
  return s;
}

}  // namespace

std::shared_ptr<control_session> control_session::serve(unix_socket socket, api_handler& handler,
                                                        session_auth auth,
                                                        const session_limits& limits,
                                                        std::function<void()> on_closed) {
  return start_serving<asio::local::stream_protocol>(std::move(socket), handler, std::move(auth),
                                                     limits, std::move(on_closed));
}

std::shared_ptr<control_session> control_session::serve(tcp_socket socket, api_handler& handler,
                                                        session_auth auth,
                                                        const session_limits& limits,
                                                        std::function<void()> on_closed) {
  return start_serving<asio::ip::tcp>(std::move(socket), handler, std::move(auth), limits,
                                      std::move(on_closed));
}

std::shared_ptr<control_session> control_session::refuse(unix_socket socket, api_response refusal,
                                                         const session_limits& limits,
                                                         std::function<void()> on_closed) {
  return start_refusing<asio::local::stream_protocol>(std::move(socket), std::move(refusal), limits,
                                                      std::move(on_closed));
}

std::shared_ptr<control_session> control_session::refuse(tcp_socket socket, api_response refusal,
                                                         const session_limits& limits,
                                                         std::function<void()> on_closed) {
  return start_refusing<asio::ip::tcp>(std::move(socket), std::move(refusal), limits,
                                       std::move(on_closed));
}

}  // namespace baton::supervisor
