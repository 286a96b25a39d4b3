// A control_server's transport: binds, sets access control, accepts through a
// control_accept_loop, and cleans up at stop. Two implementations, one per file:
// control_unix_listener.cpp (socket file modes plus SO_PEERCRED) and control_tcp_listener.cpp
// (127.0.0.1 plus a bearer token in a private endpoint file). The control_server owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "supervisor/control_server.h"

namespace baton::supervisor {

class control_listener {
 public:
  virtual ~control_listener();
  virtual status start() = 0;
  virtual void stop() = 0;  // idempotent
  virtual std::size_t session_count() const = 0;
  virtual std::string description() const = 0;
  virtual std::uint16_t port() const = 0;
};

std::unique_ptr<control_listener> make_unix_listener(boost::asio::io_context& io,
                                                     api_handler& handler,
                                                     const control_server_options& options);
std::unique_ptr<control_listener> make_tcp_listener(boost::asio::io_context& io,
                                                    api_handler& handler,
                                                    const control_server_options& options);

}  // namespace baton::supervisor
