// What every control API transport shares once it has a listening acceptor: the accept loop
// (backing off when accept fails), the session table with its limits, and stop() closing the
// acceptor and every session. The transport (control_unix_listener.cpp, control_tcp_listener.cpp)
// owns binding and cleanup and decides, per connection, whether to serve it, with what
// session_auth, and whose it is (uid, and whether that uid is privileged: the daemon's own or
// root). Header-only because it is a template over the Asio protocol; Beast stays in
// control_session.cpp.
//
// The limits keep the socket open to its owner however many connections others (or the owner's
// own runaway scripts) hold; supervisor/DAEMON.md ("Connections") is the user's description:
// - every session waits at most header_timeout for a request header (control_session.h);
// - one uid holds at most max_per_uid sessions, all uids together at most max_sessions, and
//   unprivileged uids together at most max_sessions - max_per_uid (the rest is the owner's);
// - a connection past a limit takes the slot of the longest-waiting idle session of the same
//   bucket (its uid; else the biggest holder), which is answered 503 and closed: an idle
//   connection never keeps out a new one, and a client whose request has arrived is never
//   evicted. When every session of the bucket is busy with a request, a newcomer whose request
//   has arrived is still served (up to twice max_sessions in all); otherwise it is answered 503
//   itself (after reading its request, so it reads the answer, not a broken pipe);
// - such refusals beyond the limits are bounded too (max_sessions of them); past that a
//   connection is closed unanswered, the one case left where a client sees a reset.
#pragma once

#include <algorithm>
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
  std::uint32_t uid = 0;                // whose connection it is, for the per-uid limit
  bool privileged = false;              // the daemon's own uid or root
};

struct connection_limits {
  std::size_t max_sessions = 256;  // all sessions; at least 2
  std::size_t max_per_uid = 32;    // below max_sessions; also the slots kept for privileged uids
};

template <class Protocol>
class control_accept_loop : public std::enable_shared_from_this<control_accept_loop<Protocol>> {
 public:
  using socket_type = typename Protocol::socket;
  using acceptor_type = typename Protocol::acceptor;
  using admit_fn = std::function<control_admission(socket_type&)>;
  using log_fn = std::function<void(const std::string&)>;

  control_accept_loop(acceptor_type acceptor, api_handler& handler, session_limits limits,
                      connection_limits caps, log_fn log, admit_fn admit)
      : acceptor_(std::move(acceptor)),
        retry_timer_(acceptor_.get_executor()),
        handler_(handler),
        limits_(limits),
        caps_(caps),
        log_(std::move(log)),
        admit_(std::move(admit)) {
    caps_.max_sessions = std::max<std::size_t>(caps_.max_sessions, 2);
    caps_.max_per_uid = std::clamp<std::size_t>(caps_.max_per_uid, 1, caps_.max_sessions - 1);
  }

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
    std::uint32_t uid = 0;
    bool privileged = false;
    bool counted = false;  // holds a slot (false: an eviction or an over-limit refusal in flight)
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

  static std::string uid_text(std::uint32_t uid) { return "uid " + std::to_string(uid); }

  // 503 with "retry": true: the client may try again at once (control_client does, briefly).
  static api_response busy_response(const std::string& why) {
    auto r = error_response(503, why + "; try again");
    r.body["retry"] = true;
    return r;
  }

  // Frees one slot of the sessions `in_bucket` accepts by evicting the one that has waited
  // longest for a request (and has none arriving). False if every one of them is busy.
  template <class Pred>
  bool evict_oldest(Pred in_bucket, const std::string& why) {
    std::shared_ptr<control_session> victim;
    entry* victim_entry = nullptr;
    std::optional<std::chrono::steady_clock::time_point> oldest;
    for (auto& [id, e] : sessions_) {
      if (!e.counted || !in_bucket(e)) continue;
      auto s = e.session.lock();
      if (!s) continue;
      const auto since = s->waiting_since();
      if (!since || s->has_unread_bytes()) continue;
      if (!oldest || *since < *oldest) {
        oldest = since;
        victim = std::move(s);
        victim_entry = &e;
      }
    }
    if (!victim) return false;
    uncount(*victim_entry);
    if (evictions_++ % 1000 == 0) {
      log("control API: " + why + "; closing the longest-idle connection (" +
          std::to_string(evictions_) + " so far)");
    }
    victim->evict(
        busy_response("the baton daemon closed this idle connection to make room: " + why));
    return true;
  }

  // Makes room for a connection of `uid` if a limit is reached; the refusal text when it cannot.
  std::optional<std::string> make_room(std::uint32_t uid, bool privileged) {
    const auto& c = caps_;
    const auto held = per_uid_.find(uid);
    if (held != per_uid_.end() && held->second >= c.max_per_uid) {
      const auto why = "too many connections from " + uid_text(uid) + " (limit " +
                       std::to_string(c.max_per_uid) + " per user)";
      if (evict_oldest([uid](const entry& e) { return e.uid == uid; }, why)) return std::nullopt;
      return why;
    }
    if (!privileged && unprivileged_ >= c.max_sessions - c.max_per_uid) {
      const auto why = "too many connections from other users (limit " +
                       std::to_string(c.max_sessions - c.max_per_uid) + ")";
      if (evict_oldest([hog = biggest(false)](const entry& e) { return e.uid == hog; }, why) ||
          evict_oldest([](const entry& e) { return !e.privileged; }, why)) {
        return std::nullopt;
      }
      return why;
    }
    if (counted_ >= c.max_sessions) {
      const auto why =
          "too many connections to the baton daemon (limit " + std::to_string(c.max_sessions) + ")";
      if (evict_oldest([hog = biggest(true)](const entry& e) { return e.uid == hog; }, why) ||
          evict_oldest([](const entry&) { return true; }, why)) {
        return std::nullopt;
      }
      return why;
    }
    return std::nullopt;
  }

  // The uid holding the most slots (among unprivileged ones unless `any`).
  std::uint32_t biggest(bool any) const {
    std::uint32_t uid = 0;
    std::size_t most = 0;
    for (const auto& [id, e] : sessions_) {
      if (!e.counted || (!any && e.privileged)) continue;
      const auto n = per_uid_.at(e.uid);
      if (n > most) {
        most = n;
        uid = e.uid;
      }
    }
    return uid;
  }

  void count(entry& e) {
    e.counted = true;
    ++per_uid_[e.uid];
    ++counted_;
    if (!e.privileged) ++unprivileged_;
  }

  void uncount(entry& e) {
    if (!e.counted) return;
    e.counted = false;
    if (--per_uid_[e.uid] == 0) per_uid_.erase(e.uid);
    --counted_;
    if (!e.privileged) --unprivileged_;
  }

  void admit(socket_type socket) {
    control_admission verdict = admit_(socket);
    std::optional<std::string> full = make_room(verdict.uid, verdict.privileged);
    if (full) {
      boost::system::error_code ec;
      const bool request_here = !verdict.refusal && socket.available(ec) > 0 && !ec;
      if (request_here && counted_ < 2 * caps_.max_sessions) {
        // Its request is here already: served past the limit (up to twice it) rather than
        // refused, so many clients at once all get their answers.
        full.reset();
      } else if (sessions_.size() - counted_ >= caps_.max_sessions) {
        return;  // even the refusals are at their limit: closed unanswered as it goes out of scope
      } else {
        verdict.refusal = busy_response(*full);
      }
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
    auto& e = sessions_[id];
    e.session = s;
    e.uid = verdict.uid;
    e.privileged = verdict.privileged;
    // A stranger's 403 counts against its uid like any session; only an over-limit 503 does not.
    if (!full) count(e);
  }

  void forget(std::uint64_t id) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    uncount(it->second);
    sessions_.erase(it);
  }

  acceptor_type acceptor_;
  boost::asio::steady_timer retry_timer_;
  api_handler& handler_;
  session_limits limits_;
  connection_limits caps_;
  log_fn log_;
  admit_fn admit_;
  std::map<std::uint64_t, entry> sessions_;
  std::map<std::uint32_t, std::size_t> per_uid_;  // counted sessions by uid
  std::size_t counted_ = 0;
  std::size_t unprivileged_ = 0;
  std::uint64_t evictions_ = 0;
  std::uint64_t next_id_ = 0;
  bool stopped_ = false;
};

}  // namespace baton::supervisor
