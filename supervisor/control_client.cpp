#include "supervisor/control_client.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <string>
#include <thread>

#include "os/env.h"

namespace baton::supervisor::control_client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// One exchange on a private io_context. Asynchronous inside so a single basic_stream deadline
// bounds connect, write and read together. `where` names the daemon in every message.
template <class Protocol>
class exchange {
 public:
  exchange(typename Protocol::endpoint endpoint, std::string where, std::string not_running_hint,
           http::request<http::string_body> request, std::chrono::milliseconds timeout)
      : endpoint_(std::move(endpoint)),
        where_(std::move(where)),
        not_running_hint_(std::move(not_running_hint)),
        stream_(io_),
        request_(std::move(request)),
        timeout_(timeout) {}

  result<api_response> run() {
    parser_.body_limit(max_response_bytes);
    stream_.expires_after(timeout_);
    stream_.async_connect(endpoint_, [this](error_code ec) { on_connect(ec); });
    io_.run();
    if (failure_) return *failure_;
    return to_response();
  }

 private:
  void on_connect(error_code ec) {
    if (ec) {
      std::string hint;
      if (ec == asio::error::not_found || ec == boost::system::errc::no_such_file_or_directory ||
          ec == asio::error::connection_refused) {
        hint = not_running_hint_;
      } else if (ec == asio::error::access_denied || ec == boost::system::errc::permission_denied) {
        hint = " (is your user in the daemon's group?)";
      } else if (ec == beast::error::timeout) {
        return fail("cannot connect to baton daemon at " + where_ + ": timed out after " +
                    std::to_string(timeout_.count()) + " ms");
      }
      return fail("cannot connect to baton daemon at " + where_ + ": " + ec.message() + hint);
    }
    http::async_write(stream_, request_, [this](error_code wec, std::size_t) { on_write(wec); });
  }

  void on_write(error_code ec) {
    if (ec == beast::error::timeout) return timed_out();
    // The daemon may answer and close before reading all we sent (a 413 or a refusal): the write
    // then fails with a broken pipe, but the answer is waiting to be read.
    write_error_ = ec;
    http::async_read(stream_, buffer_, parser_,
                     [this](error_code rec, std::size_t) { on_read(rec); });
  }

  void on_read(error_code ec) {
    if (ec == beast::error::timeout) return timed_out();
    if (ec) {
      const auto& cause = write_error_ ? write_error_ : ec;
      return fail("talking to baton daemon at " + where_ + ": " + cause.message());
    }
    error_code ignored;
    stream_.socket().shutdown(Protocol::socket::shutdown_both, ignored);
  }

  void timed_out() {
    fail("baton daemon at " + where_ + " did not answer within " +
         std::to_string(timeout_.count()) + " ms");
  }

  void fail(std::string message) { failure_ = make_error(std::move(message)); }

  result<api_response> to_response() {
    auto& res = parser_.get();
    api_response out;
    out.status = static_cast<int>(res.result_int());
    if (res.body().empty()) {
      out.body = nlohmann::json::object();
      return out;
    }
    auto body = parse_json_limited(res.body());
    if (!body) {
      return make_error("baton daemon at " + where_ + " sent a malformed answer (HTTP " +
                        std::to_string(out.status) + "): " + body.error().message);
    }
    out.body = std::move(*body);
    return out;
  }

  typename Protocol::endpoint endpoint_;
  std::string where_;
  std::string not_running_hint_;
  asio::io_context io_;
  beast::basic_stream<Protocol> stream_;
  http::request<http::string_body> request_;
  std::chrono::milliseconds timeout_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  error_code write_error_;
  std::optional<error> failure_;
};

http::request<http::string_body> make_request(std::string_view method, std::string_view target,
                                              const nlohmann::json& body,
                                              const std::string& token) {
  http::request<http::string_body> request;
  request.method_string(method);
  request.target(target);
  request.version(11);
  request.set(http::field::host, "localhost");
  request.set(http::field::user_agent, "baton-cli");
  if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
  request.keep_alive(false);
  if (!body.is_null()) {
    request.set(http::field::content_type, "application/json");
    request.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  request.prepare_payload();
  return request;
}

template <class Protocol>
result<api_response> run_exchange(typename Protocol::endpoint endpoint, const std::string& where,
                                  const std::string& not_running_hint,
                                  http::request<http::string_body> request,
                                  std::chrono::milliseconds timeout) {
  try {
    exchange<Protocol> x(std::move(endpoint), where, not_running_hint, std::move(request), timeout);
    return x.run();
  } catch (const std::exception& e) {  // allocation failure inside Asio: a boundary, not a crash
    return make_error("talking to baton daemon at " + where + ": " + e.what());
  }
}

result<api_response> call_unix(const std::filesystem::path& socket_path, std::string_view method,
                               std::string_view target, const nlohmann::json& body,
                               std::chrono::milliseconds timeout) {
  if (socket_path.native().size() > 107) {
    return make_error("socket path " + socket_path.string() + " is too long for a Unix socket (" +
                      std::to_string(socket_path.native().size()) + " bytes, at most 107)");
  }
  return run_exchange<local>(local::endpoint(socket_path.string()), socket_path.string(),
                             " (is `baton serve` running?)", make_request(method, target, body, {}),
                             timeout);
}

}  // namespace

result<api_response> call_tcp(const control_endpoint& endpoint, const std::string& origin,
                              std::string_view method, std::string_view target,
                              const nlohmann::json& body, std::chrono::milliseconds timeout) {
  error_code ec;
  const auto address = asio::ip::make_address_v4(endpoint.address, ec);
  if (ec || !address.is_loopback()) {
    return make_error(origin + ": address " + endpoint.address + " is not IPv4 loopback");
  }
  const std::string where =
      endpoint.address + ":" + std::to_string(endpoint.port) + " (from " + origin + ")";
  return run_exchange<tcp>(tcp::endpoint(address, endpoint.port), where,
                           " (is `baton serve` running? the endpoint file may be left over from "
                           "a daemon that was killed)",
                           make_request(method, target, body, endpoint.token), timeout);
}

namespace {

result<api_response> call_once(control_transport transport, const std::filesystem::path& path,
                               std::string_view method, std::string_view target,
                               const nlohmann::json& body, std::chrono::milliseconds timeout) {
  if (transport == control_transport::unix_socket) {
    return call_unix(path, method, target, body, timeout);
  }
  auto endpoint = load_control_endpoint(os::env::default_env(), path);
  if (!endpoint) return endpoint.error();
  return call_tcp(*endpoint, "endpoint file " + path.string(), method, target, body, timeout);
}

}  // namespace

result<api_response> call(control_transport transport, const std::filesystem::path& path,
                          std::string_view method, std::string_view target,
                          const nlohmann::json& body, std::chrono::milliseconds timeout) {
  // A 503 with "retry": true is the daemon's connection limit (control_accept_loop.h): our
  // connection came while others held every slot, and the request was not acted on. Try again
  // a few times, soon; the last answer is the user's.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(20);
  for (int attempt = 0;; ++attempt) {
    const auto left = attempt == 0 ? timeout
                                   : std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline - std::chrono::steady_clock::now());
    auto r = call_once(transport, path, method, target, body,
                       std::max(left, std::chrono::milliseconds(1)));
    const bool busy = r && r->status == 503 && r->body.is_object() && r->body.value("retry", false);
    if (!busy || attempt >= 5 || left < pause * 2) return r;
    std::this_thread::sleep_for(pause);
    pause *= 2;
  }
}

result<api_response> call(const std::filesystem::path& path, std::string_view method,
                          std::string_view target, const nlohmann::json& body,
                          std::chrono::milliseconds timeout) {
  return call(native_control_transport(), path, method, target, body, timeout);
}

}  // namespace baton::supervisor::control_client
