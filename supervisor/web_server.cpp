#include "supervisor/web_server.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <exception>

namespace baton::supervisor {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

struct web_server::session_base {
  virtual ~session_base() = default;
  virtual void close() = 0;
  // Since when it has waited for a request's header; nullopt while it reads or answers one.
  virtual std::optional<std::chrono::steady_clock::time_point> idle_since() const = 0;
};

namespace {

class web_session final : public web_server::session_base,
                          public std::enable_shared_from_this<web_session> {
 public:
  web_session(tcp::socket socket, const web_handler& handler, const web_server_limits& limits)
      : stream_(std::move(socket)), handler_(handler), limits_(limits) {}

  void run() {
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&web_session::do_read, shared_from_this()));
  }

  void close() override {
    idle_since_.reset();
    error_code ignored;
    stream_.socket().close(ignored);
  }

  std::optional<std::chrono::steady_clock::time_point> idle_since() const override {
    return idle_since_;
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(0);  // GETs only: a body is an error, not something to buffer
    parser_->header_limit(static_cast<std::uint32_t>(limits_.header_limit));
    idle_since_ = std::chrono::steady_clock::now();
    // The header timeout first (an idle keep-alive connection), then the whole request's.
    stream_.expires_after(std::min(limits_.header_timeout, limits_.read_timeout));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&web_session::on_read, shared_from_this()));
  }

  void on_read(error_code ec, std::size_t) {
    idle_since_.reset();
    try {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::operation_aborted) {
        return shut_down();
      }
      if (ec == http::error::body_limit) {
        return answer(plain(413, "request bodies are not accepted here (read-only listener)"),
                      false, 11);
      }
      if (ec == http::error::header_limit) return answer(plain(431, "header too large"), false, 11);
      if (ec) {
        if (ec.category() == make_error_code(http::error::bad_method).category() &&
            ec != http::error::partial_message) {
          return answer(plain(400, "malformed HTTP request: " + ec.message()), false, 11);
        }
        return shut_down();
      }
      auto& req = parser_->get();
      web_request r{std::string(req.method_string()), std::string(req.target()), std::nullopt};
      if (const auto f = req.find(http::field::authorization); f != req.end()) {
        r.authorization = std::string(f->value());
      }
      web_response out;
      try {
        out = handler_(r);
      } catch (const std::exception& e) {
        out = plain(500, std::string("internal error: ") + e.what());
      }
      answer(out, req.keep_alive(), req.version());
    } catch (const std::exception&) {
      shut_down();  // out of memory or similar: drop this client, keep the daemon
    }
  }

  static web_response plain(int status, std::string message) {
    web_response r;
    r.status = status;
    r.content_type = "text/plain; charset=utf-8";
    r.body = std::move(message) + "\n";
    return r;
  }

  void answer(const web_response& r, bool keep_alive, unsigned version) {
    response_ = {};
    response_.version(version == 10 ? 10 : 11);
    response_.result(static_cast<unsigned>(r.status >= 100 && r.status <= 599 ? r.status : 500));
    response_.set(http::field::server, "baton");
    response_.set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) response_.set(name, value);
    response_.keep_alive(keep_alive);
    response_.body() = r.body;
    response_.prepare_payload();
    stream_.expires_after(limits_.read_timeout);
    http::async_write(stream_, response_,
                      beast::bind_front_handler(&web_session::on_write, shared_from_this()));
  }

  void on_write(error_code ec, std::size_t) {
    if (ec || !response_.keep_alive()) return shut_down();
    do_read();
  }

  void shut_down() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;  // alive until async_write completes
  // A copy of the server's: a session may outlive a stopped server by one handler.
  web_handler handler_;
  web_server_limits limits_;
  std::optional<std::chrono::steady_clock::time_point> idle_since_;
};

}  // namespace

web_server::web_server(tcp::acceptor acceptor, web_handler handler, web_server_limits limits,
                       log_fn log)
    : acceptor_(std::move(acceptor)),
      retry_timer_(acceptor_.get_executor()),
      handler_(std::move(handler)),
      limits_(limits),
      log_(std::move(log)) {
  limits_.max_sessions = std::max<std::size_t>(limits_.max_sessions, 1);
}

web_server::~web_server() = default;

void web_server::start() { do_accept(); }

void web_server::stop() {
  stopped_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  auto live = std::move(sessions_);
  sessions_.clear();
  for (auto& w : live) {
    if (auto s = w.lock()) s->close();
  }
}

std::size_t web_server::session_count() const {
  return static_cast<std::size_t>(std::count_if(sessions_.begin(), sessions_.end(),
                                                [](const auto& w) { return !w.expired(); }));
}

void web_server::do_accept() {
  acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
    self->on_accept(ec, std::move(socket));
  });
}

bool web_server::make_room() {
  std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
  if (sessions_.size() < limits_.max_sessions) return true;
  std::shared_ptr<session_base> oldest;
  std::optional<std::chrono::steady_clock::time_point> when;
  for (const auto& w : sessions_) {
    auto s = w.lock();
    if (!s) continue;
    const auto since = s->idle_since();
    if (since && (!when || *since < *when)) {
      when = since;
      oldest = std::move(s);
    }
  }
  if (!oldest) return false;
  oldest->close();
  std::erase_if(sessions_, [&](const auto& w) { return w.lock() == oldest; });
  return true;
}

void web_server::on_accept(error_code ec, tcp::socket socket) {
  if (stopped_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of descriptors and the like: back off instead of spinning.
    if (log_) log_("accept failed: " + ec.message());
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](error_code tec) {
      if (!tec && !self->stopped_) self->do_accept();
    });
    return;
  }
  try {
    if (make_room()) {
      auto s = std::make_shared<web_session>(std::move(socket), handler_, limits_);
      sessions_.push_back(s);
      s->run();
    }  // else: every session is busy answering; the newcomer is closed as `socket` goes
  } catch (const std::exception& e) {
    if (log_) log_(std::string("dropping a connection: ") + e.what());
  }
  do_accept();
}

}  // namespace baton::supervisor
