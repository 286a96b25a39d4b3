// One accepted connection to the control API, over a Unix socket or loopback TCP (one template
// in the .cpp, instantiated for both). A session reads HTTP/1.1 requests under a size limit and a
// deadline, checks the bearer token when the transport needs one (TCP), routes each request
// through parse_api_request to the daemon's api_handler and writes the JSON answer, keeping the
// connection alive while the client asks for it. A refusing session (403 for a stranger, 503 past
// the session limit) reads one request, answers it with the refusal and closes. Every session
// waits at most header_timeout for a header, and can be evicted while it waits (503, then closed)
// when the accept loop needs its slot for a newer connection (control_accept_loop.h). Sessions own
// themselves through their pending operations; the server only keeps weak references so that
// stop() can close them. Beast lives in the .cpp only.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/control_api.h"

namespace baton::supervisor {

struct session_limits {
  // Time allowed to read one whole request (and to write one answer): a stalled or trickling
  // client is dropped when it runs out, however much it has sent.
  std::chrono::milliseconds read_timeout{10000};
  // Time allowed from the connection (or the previous answer on a kept-alive one) to the end of
  // the request's header, like nginx's client_header_timeout: an idle connection is closed
  // after this, silently (nobody asked anything). At most read_timeout.
  std::chrono::milliseconds header_timeout{5000};
  std::size_t body_limit = max_request_body_bytes;
  std::size_t header_limit = 64 * 1024;
};

// Who the server decided the peer is, and what every request must still prove.
struct session_auth {
  std::uint32_t peer_uid = 0;  // passed to the handler in api_request
  std::uint32_t peer_gid = 0;
  std::vector<std::uint32_t> peer_groups = {};
  // Root or the daemon's own uid (control_accept_loop.h): may act on every job.
  bool privileged = true;
  // Non-empty: every request needs `Authorization: Bearer <token>` with this token, else it is
  // answered 401 and the connection closed (check_bearer in control_token.h).
  std::string bearer_token;
};

class control_session {
 public:
  using unix_socket = boost::asio::local::stream_protocol::socket;
  using tcp_socket = boost::asio::ip::tcp::socket;

  // Serves requests on `socket` until the client closes, times out or sends something that
  // cannot be answered on the same connection. `on_closed` runs exactly once, on the io thread,
  // when the session is gone. `handler` must outlive the session.
  static std::shared_ptr<control_session> serve(unix_socket socket, api_handler& handler,
                                                session_auth auth, const session_limits& limits,
                                                std::function<void()> on_closed);
  static std::shared_ptr<control_session> serve(tcp_socket socket, api_handler& handler,
                                                session_auth auth, const session_limits& limits,
                                                std::function<void()> on_closed);

  // Reads one request, answers it with `refusal` whatever it asked, and closes. Reading first
  // means the client always gets the answer instead of a broken pipe on its write.
  static std::shared_ptr<control_session> refuse(unix_socket socket, api_response refusal,
                                                 const session_limits& limits,
                                                 std::function<void()> on_closed);
  static std::shared_ptr<control_session> refuse(tcp_socket socket, api_response refusal,
                                                 const session_limits& limits,
                                                 std::function<void()> on_closed);

  virtual ~control_session();

  // Closes the connection; pending operations end with operation_aborted. Io thread only.
  virtual void close() = 0;

  // Since when the session has waited for a request's header (accepted, or answered and kept
  // alive); nullopt once a header is in (the request is read, handled or answered) and after
  // evict(). What the accept loop may evict to make room. Io thread only.
  virtual std::optional<std::chrono::steady_clock::time_point> waiting_since() const = 0;
  // Whether request bytes sit unread in the socket: a client whose request has arrived is about
  // to be served, never evicted.
  virtual bool has_unread_bytes() const = 0;
  // Makes room: stops waiting, answers `why` (Connection: close) in place of the request it
  // waited for, and closes. A client that writes its request meanwhile still reads the answer.
  virtual void evict(api_response why) = 0;
};

}  // namespace baton::supervisor
