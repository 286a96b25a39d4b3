#include "supervisor/http_listener.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace baton::supervisor;
namespace asio = boost::asio;

namespace {

// Answers every call with its name, so a test sees which calls got through.
struct metrics_echo_handler final : api_handler {
  std::vector<std::string> seen;
  api_response handle(const api_call& call) override {
    seen.emplace_back(call_name(call));
    api_response r;
    r.text = "baton_daemon_uptime_seconds 1\n";
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  }
};

// One HTTP/1.1 exchange over a plain blocking socket: what a scraper sends.
std::string exchange(std::uint16_t port, const std::string& request) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::address_v4::loopback(), port});
  asio::write(s, asio::buffer(request));
  std::string answer;
  boost::system::error_code ec;
  char buf[4096];
  while (!ec) {
    const auto n = s.read_some(asio::buffer(buf), ec);
    answer.append(buf, n);
  }
  return answer;
}

}  // namespace

TEST_CASE("http_listen: loopback addresses only, each error naming the field",
          "[unit][http_listener]") {
  CHECK(parse_http_listen("127.0.0.1:9464").value() == http_listen_address{"127.0.0.1", 9464});
  CHECK(parse_http_listen("[::1]:0").value() == http_listen_address{"::1", 0});
  CHECK(parse_http_listen("localhost:80").value() == http_listen_address{"127.0.0.1", 80});
  CHECK(parse_http_listen("127.1.2.3:1").value().host == "127.1.2.3");
  for (const char* bad : {"0.0.0.0:9464", "10.0.0.1:1", "[::]:1", "example.com:80", "127.0.0.1",
                          "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x", ":80", ""}) {
    INFO(bad);
    auto r = parse_http_listen(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.rfind("http_listen: ", 0) == 0);
  }
  CHECK_THAT(parse_http_listen("0.0.0.0:9464").error().message,
             Catch::Contains("0.0.0.0 is not a loopback address"));
}

TEST_CASE("the listener serves GET /metrics as text over loopback TCP, and refuses the rest",
          "[unit][http_listener]") {
  asio::io_context io;
  metrics_echo_handler inner;
  http_listener l(io, inner, {"127.0.0.1", 0}, {});
  REQUIRE(l.start());
  REQUIRE(l.port() != 0);
  CHECK(l.url() == "http://127.0.0.1:" + std::to_string(l.port()));
  auto guard = asio::make_work_guard(io);
  std::thread t([&] { io.run(); });

  const auto ok =
      exchange(l.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto cancel =
      exchange(l.port(), "POST /v1/jobs/a/cancel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto status =
      exchange(l.port(), "GET /v1/jobs/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  asio::post(io, [&] {
    l.stop();
    guard.reset();
  });
  t.join();

  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK_THAT(ok, Catch::Contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  CHECK_THAT(ok, Catch::EndsWith("\r\n\r\nbaton_daemon_uptime_seconds 1\n"));
  CHECK(cancel.rfind("HTTP/1.1 405", 0) == 0);  // read-only, whatever the route
  CHECK(status.rfind("HTTP/1.1 404", 0) == 0);  // no dashboard token: no job routes at all
  CHECK(inner.seen == std::vector<std::string>{"metrics"});
}

TEST_CASE("with a dashboard token the listener serves the page, and data only with the token",
          "[unit][http_listener]") {
  asio::io_context io;
  metrics_echo_handler inner;
  const std::string token(64, 'c');
  http_listener l(io, inner, {"127.0.0.1", 0}, {}, token);
  REQUIRE(l.start());
  CHECK(l.dashboard_url() == l.url() + "/?token=" + token);
  auto guard = asio::make_work_guard(io);
  std::thread t([&] { io.run(); });
  const auto page = exchange(l.port(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto no_token =
      exchange(l.port(), "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto with_token =
      exchange(l.port(),
               "GET /v1/jobs?token=" + token + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto cancel = exchange(l.port(), "POST /v1/jobs/a/cancel?token=" + token +
                                             " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  asio::post(io, [&] {
    l.stop();
    guard.reset();
  });
  t.join();
  CHECK(page.rfind("HTTP/1.1 200", 0) == 0);
  CHECK_THAT(page, Catch::Contains("Content-Security-Policy: default-src 'self'"));
  CHECK(no_token.rfind("HTTP/1.1 401", 0) == 0);
  CHECK(with_token.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(cancel.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(inner.seen == std::vector<std::string>{"list"});
}

TEST_CASE("a listener on a port in use fails naming http_listen", "[unit][http_listener]") {
  asio::io_context io;
  metrics_echo_handler inner;
  http_listener first(io, inner, {"127.0.0.1", 0}, {});
  REQUIRE(first.start());
  http_listener second(io, inner, {"127.0.0.1", first.port()}, {});
  auto s = second.start();
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::StartsWith("http_listen: cannot bind http://127.0.0.1:"));
}
