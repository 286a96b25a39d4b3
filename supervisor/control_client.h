// The CLI's side of the control API: one synchronous HTTP/1.1 exchange per call, under one
// deadline, over the daemon's Unix socket (Linux) or over loopback TCP to the port named in the
// daemon's endpoint file, sending the file's bearer token (Windows). Transport failures are errors
// written for the user ("cannot connect ... is `baton serve` running?"); any HTTP answer, 4xx
// and 5xx included, is a response whose body carries the daemon's {"error": ...}. One exchange
// template serves both transports; Beast lives in the .cpp only.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"
#include "supervisor/control_api.h"
#include "supervisor/control_endpoint.h"
#include "supervisor/control_server.h"

namespace baton::supervisor::control_client {

// Largest response accepted (a logs chunk is the biggest thing the daemon sends).
inline constexpr std::size_t max_response_bytes = std::size_t{16} << 20;

// Sends `method target` with `body` as JSON (no body when it is null) and returns the answer.
// `path` is the control socket, or on Windows the endpoint file (native_control_transport()).
result<api_response> call(const std::filesystem::path& path, std::string_view method,
                          std::string_view target, const nlohmann::json& body = nullptr,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The same over an explicit transport: tcp_loopback reads the endpoint file at `path` first.
result<api_response> call(control_transport transport, const std::filesystem::path& path,
                          std::string_view method, std::string_view target,
                          const nlohmann::json& body = nullptr,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Loopback TCP to an endpoint already read (the server's check for a live daemon; tests that
// send a wrong token). `origin` names where it came from in messages (the endpoint file).
result<api_response> call_tcp(const control_endpoint& endpoint, const std::string& origin,
                              std::string_view method, std::string_view target,
                              const nlohmann::json& body = nullptr,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace baton::supervisor::control_client
