// One accepted connection to the control socket. A session reads HTTP/1.1 requests under a size
// limit and a deadline, routes each through parse_api_request to the daemon's api_handler and
// writes the JSON answer, keeping the connection alive while the client asks for it. A refusing
// session (403 for a stranger, 503 past the session limit) reads one request, answers it with the
// refusal and closes. Sessions own themselves through their pending operations; the server
// only keeps weak references so that stop() can close them. Beast lives in the .cpp only.
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "supervisor/control_api.h"

namespace baton::supervisor {

struct session_limits {
  // Time allowed to read one whole request (and to write one answer): a stalled or trickling
  // client is dropped when it runs out, however much it has sent.
  std::chrono::milliseconds read_timeout{10000};
  std::size_t body_limit = max_request_body_bytes;
  std::size_t header_limit = 64 * 1024;
};

class control_session {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;

  // Serves requests on `socket` until the client closes, times out or sends something that
  // cannot be answered on the same connection. `on_closed` runs exactly once, on the io thread,
  // when the session is gone. `handler` must outlive the session.
  static std::shared_ptr<control_session> serve(socket_type socket, api_handler& handler,
                                                std::uint32_t peer_uid,
                                                const session_limits& limits,
                                                std::function<void()> on_closed);

  // Reads one request, answers it with `refusal` whatever it asked, and closes. Reading first
  // means the client always gets the answer instead of a broken pipe on its write.
  static std::shared_ptr<control_session> refuse(socket_type socket, api_response refusal,
                                                 const session_limits& limits,
                                                 std::function<void()> on_closed);

  virtual ~control_session();

  // Closes the connection; pending operations end with operation_aborted. Io thread only.
  virtual void close() = 0;
};

}  // namespace baton::supervisor
