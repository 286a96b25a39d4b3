// The loopback TCP transport of the control API (Windows' transport), on any platform: the same
// server, sessions and client run here on Linux and under wine.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "os/env.h"
#include "supervisor/control_client.h"
#include "supervisor/control_endpoint.h"
#include "supervisor/control_server.h"
#include "support/private_file_checks.h"

using namespace baton::supervisor;
namespace os = baton::os;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

class counting_handler : public api_handler {
 public:
  api_response handle(const api_call& call) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    if (std::holds_alternative<list_call>(call)) return {200, {{"jobs", nlohmann::json::array()}}};
    if (const auto* s = std::get_if<submit_call>(&call)) {
      return {201, {{"id", "j-1"}, {"uid", s->peer_uid}}};
    }
    return {200, {{"status", "ok"}}};
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  int calls_ = 0;
};

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("baton-tcp-" + name);
  fs::remove_all(dir);
  return dir;
}

control_server_options tcp_options(const fs::path& file, std::uint16_t port = 0) {
  control_server_options o;
  o.transport = control_transport::tcp_loopback;
  o.socket_path = file;
  o.port = port;
  return o;
}

struct running_server {
  explicit running_server(const fs::path& file, std::uint16_t port = 0)
      : server(io, handler, tcp_options(file, port)) {
    auto s = server.start();
    REQUIRE(s);
    thread = std::thread([this] { io.run(); });
  }
  ~running_server() { stop(); }
  void stop() {
    if (!thread.joinable()) return;
    asio::post(io, [this] { server.stop(); });
    thread.join();
  }

  asio::io_context io;
  counting_handler handler;
  control_server server;
  std::thread thread;
};

api_response must_call_tcp(const fs::path& file, std::string_view method, std::string_view target,
                           const nlohmann::json& body = nullptr) {
  auto r = control_client::call(control_transport::tcp_loopback, file, method, target, body, 5s);
  REQUIRE(r);
  return *r;
}

// Everything the server answers to `bytes` on a fresh connection, until it closes.
std::string raw_exchange(std::uint16_t port, const std::string& bytes) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::address_v4::loopback(), port});
  asio::write(s, asio::buffer(bytes));
  std::string answer;
  boost::system::error_code ec;
  asio::read(s, asio::dynamic_buffer(answer), ec);  // to EOF: the server closes after a 401
  return answer;
}

}  // namespace

TEST_CASE("tcp: requests with the endpoint file's token are served", "[unit][control_tcp]") {
  const auto dir = scratch("serve");
  const auto file = dir / "sub" / "control-endpoint.json";
  running_server srv(file);
  REQUIRE(fs::exists(file));
  auto endpoint = load_control_endpoint(os::env::default_env(), file);
  REQUIRE(endpoint);
  CHECK(endpoint->port == srv.server.port());
  CHECK(endpoint->port != 0);
  CHECK(endpoint->address == "127.0.0.1");
  CHECK_THAT(srv.server.description(),
             Catch::Contains("127.0.0.1:" + std::to_string(endpoint->port)) &&
                 Catch::Contains(file.string()));
  baton::test::check_private_file_access(file);

  CHECK(must_call_tcp(file, "GET", "/v1/health").status == 200);
  auto list = must_call_tcp(file, "GET", "/v1/jobs");
  CHECK(list.status == 200);
  CHECK(list.body.at("jobs").empty());
  auto submit =
      must_call_tcp(file, "POST", "/v1/jobs",
                    {{"spec", {{"name", "x"}}}, {"base_dir", fs::current_path().string()}});
  CHECK(submit.status == 201);
  CHECK(srv.handler.calls() == 3);

  srv.stop();
  CHECK_FALSE(fs::exists(file));  // stop() removes our endpoint file
  auto gone =
      control_client::call(control_transport::tcp_loopback, file, "GET", "/v1/jobs", nullptr, 2s);
  REQUIRE_FALSE(gone);
  CHECK_THAT(gone.error().message, Catch::Contains("(is `baton serve` running?)"));
  fs::remove_all(dir);
}

TEST_CASE("tcp: a wrong or missing token gets 401 and reaches no handler", "[unit][control_tcp]") {
  const auto dir = scratch("401");
  const auto file = dir / "control-endpoint.json";
  running_server srv(file);
  auto endpoint = load_control_endpoint(os::env::default_env(), file);
  REQUIRE(endpoint);

  auto wrong = *endpoint;
  wrong.token.back() = wrong.token.back() == '0' ? '1' : '0';
  auto r = control_client::call_tcp(wrong, "test", "GET", "/v1/jobs", nullptr, 5s);
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK_THAT(r->body.at("error").get<std::string>(), Catch::Contains("wrong control token"));

  // No Authorization header at all; the answer is JSON, says how to authenticate, and closes.
  const auto raw = raw_exchange(endpoint->port,
                                "GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n"
                                "GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n");
  CHECK_THAT(raw, Catch::StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  CHECK_THAT(raw, Catch::Contains("WWW-Authenticate: Bearer realm=\"baton\""));
  CHECK_THAT(raw, Catch::Contains("Content-Type: application/json"));
  CHECK_THAT(raw, Catch::Contains("{\"error\":\"missing Authorization header"));
  CHECK(raw.find("HTTP/1.1", 1) == std::string::npos);  // one answer, then closed
  const auto basic = raw_exchange(endpoint->port,
                                  "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
                                  "Zm9vOmJhcg==\r\n\r\n");
  CHECK_THAT(basic,
             Catch::StartsWith("HTTP/1.1 401") && Catch::Contains("not a Bearer credential"));
  CHECK(srv.handler.calls() == 0);

  // The right token on the same kind of raw connection is served, kept alive for a second one.
  const std::string auth = "Authorization: Bearer " + endpoint->token + "\r\n";
  const auto good = raw_exchange(endpoint->port, "GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth +
                                                     "\r\nGET /v1/jobs HTTP/1.1\r\nHost: x\r\n" +
                                                     auth + "Connection: close\r\n\r\n");
  CHECK_THAT(good, Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK(good.find("HTTP/1.1 200 OK", 1) != std::string::npos);
  CHECK(srv.handler.calls() == 2);
  fs::remove_all(dir);
}

TEST_CASE("tcp: a live daemon keeps its endpoint file, a stale one is replaced",
          "[unit][control_tcp]") {
  const auto dir = scratch("stale");
  const auto file = dir / "control-endpoint.json";
  {
    running_server first(file);
    asio::io_context io;
    counting_handler h;
    control_server second(io, h, tcp_options(file));
    auto s = second.start();
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().message,
               Catch::Contains("another baton daemon") && Catch::Contains(file.string()));
    CHECK(must_call_tcp(file, "GET", "/v1/health").status == 200);  // the first is untouched
  }
  // Left by a daemon that was killed: its port answers nothing (or something that is not it).
  control_endpoint dead;
  dead.port = 1;
  dead.token = std::string(64, 'd');
  dead.pid = 99999;
  fs::create_directories(dir);
  std::ofstream(file) << render_control_endpoint(dead);
  {
    running_server srv(file);
    auto now = load_control_endpoint(os::env::default_env(), file);
    REQUIRE(now);
    CHECK(now->token != dead.token);
    CHECK(must_call_tcp(file, "GET", "/v1/health").status == 200);
  }
  std::ofstream(file) << "not json";
  {
    running_server srv(file);
    CHECK(must_call_tcp(file, "GET", "/v1/health").status == 200);
  }
  fs::remove_all(dir);
}

TEST_CASE("tcp: a fixed port is used, and a busy one is a clear error", "[unit][control_tcp]") {
  const auto dir = scratch("port");
  std::uint16_t port = 0;
  {
    running_server first(dir / "a.json");
    port = first.server.port();
    asio::io_context io;
    counting_handler h;
    control_server second(io, h, tcp_options(dir / "b.json", port));
    auto s = second.start();
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().message,
               Catch::Contains("cannot bind the control API to 127.0.0.1:" + std::to_string(port)));
    CHECK_FALSE(fs::exists(dir / "b.json"));
  }
  running_server fixed(dir / "c.json", port);  // free again now
  CHECK(fixed.server.port() == port);
  CHECK(must_call_tcp(dir / "c.json", "GET", "/v1/health").status == 200);
  fixed.stop();
  fs::remove_all(dir);
}
