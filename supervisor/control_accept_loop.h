// What every control API transport shares once it has a listening acceptor: the accept loop
// (backing off when accept fails), the session table with its limit (503 past max_sessions,
// silent drop past twice that), and stop() closing the acceptor and every session. The transport
// (control_unix_listener.cpp, control_tcp_listener.cpp) owns binding and cleanup and decides, per
// connection, whether to serve it and with what session_auth. Header-only because it is a
// template over the Asio protocol; Beast stays in control_session.cpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/control_api.h"
#include "supervisor/control_session.h"

namespace baton::supervisor {

// The transport's verdict on one new connection.
struct control_admission {
  std::optional<api_response> refusal;  // set: answer this once and close (403 and the like)
  session_auth auth;                    // otherwise: serve with this identity and token check
};

template <class Protocol>
class control_accept_loop : public std::enable_shared_from_this<control_accept_loop<Protocol>> {
 public:
  using socket_type = typename Protocol::socket;
  using acceptor_type = typename Protocol::acceptor;
  using admit_fn = std::function<control_admission(socket_type&)>;
  using log_fn = std::function<void(const std::string&)>;

  control_accept_loop(acceptor_type acceptor, api_handler& handler, session_limits limits,
                      std::size_t max_sessions, log_fn log, admit_fn admit)
      : acceptor_(std::move(acceptor)),
        retry_timer_(acceptor_.get_executor()),
        handler_(handler),
        limits_(limits),
        max_sessions_(max_sessions),
        log_(std::move(log)),
        admit_(std::move(admit)) {}

  // Starts accepting on the (bound, listening) acceptor. Call once.
  void start() { do_accept(); }

  // Closes the acceptor and every session. Io thread only (or while the io_context is idle).
  void stop() {
    stopped_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    std::vector<std::shared_ptr<control_session>> live;
    for (auto& [id, e] : sessions_) {
      if (auto s = e.session.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) s->close();
  }

  std::size_t session_count() const { return sessions_.size(); }

 private:
  struct entry {
    std::weak_ptr<control_session> session;
    bool serving = false;
  };

  void log(const std::string& message) const {
    if (log_) log_(message);
  }

  void do_accept() {
    acceptor_.async_accept(
        [self = this->shared_from_this()](boost::system::error_code ec, socket_type socket) {
          self->on_accept(ec, std::move(socket));
        });
  }

  void on_accept(boost::system::error_code ec, socket_type socket) {
    if (stopped_ || ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning, keep serving the rest.
      log("control API accept failed: " + ec.message());
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([self = this->shared_from_this()](boost::system::error_code tec) {
        if (!tec && !self->stopped_) self->do_accept();
      });
      return;
    }
    try {
      admit(std::move(socket));
    } catch (const std::exception& e) {
      log(std::string("control API: dropping a connection: ") + e.what());
    }
    do_accept();
  }

  void admit(socket_type socket) {
    if (sessions_.size() >= 2 * max_sessions_) {
      return;  // flooded: not even a refusal; the socket closes as it goes out of scope
    }
    control_admission verdict = admit_(socket);
    if (!verdict.refusal && serving_ >= max_sessions_) {
      verdict.refusal = error_response(503, "too many connections to the baton daemon (limit " +
                                                std::to_string(max_sessions_) + "); try again");
    }
    const std::uint64_t id = next_id_++;
    const bool serving = !verdict.refusal;
    auto on_closed = [weak = this->weak_from_this(), id] {
      if (auto self = weak.lock()) self->forget(id);
    };
    std::shared_ptr<control_session> s =
        serving ? control_session::serve(std::move(socket), handler_, std::move(verdict.auth),
                                         limits_, on_closed)
                : control_session::refuse(std::move(socket), std::move(*verdict.refusal), limits_,
                                          on_closed);
    sessions_[id] = entry{s, serving};
    if (serving) ++serving_;
  }

  void forget(std::uint64_t id) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    if (it->second.serving) --serving_;
    sessions_.erase(it);
  }

  acceptor_type acceptor_;
  boost::asio::steady_timer retry_timer_;
  api_handler& handler_;
  session_limits limits_;
  std::size_t max_sessions_;
  log_fn log_;
  admit_fn admit_;
  std::map<std::uint64_t, entry> sessions_;
  std::size_t serving_ = 0;
  std::uint64_t next_id_ = 0;
  bool stopped_ = false;
};

}  // namespace baton::supervisor
