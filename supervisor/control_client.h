// The CLI's side of the control API: one synchronous HTTP/1.1 exchange over the daemon's Unix
// socket per call, under one deadline. Transport failures are errors written for the user
// ("cannot connect ... is `baton serve` running?"); any HTTP answer, 4xx and 5xx included, is a
// response whose body carries the daemon's {"error": ...}. Beast lives in the .cpp only.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "protocol/status.h"
#include "supervisor/control_api.h"

namespace baton::supervisor::control_client {

// Largest response accepted (a logs chunk is the biggest thing the daemon sends).
inline constexpr std::size_t max_response_bytes = std::size_t{16} << 20;

// Sends `method target` with `body` as JSON (no body when it is null) and returns the answer.
result<api_response> call(const std::filesystem::path& socket_path, std::string_view method,
                          std::string_view target, const nlohmann::json& body = nullptr,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace baton::supervisor::control_client
