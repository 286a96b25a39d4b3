#include "supervisor/web_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

using namespace baton::supervisor;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

// A server on a free loopback port, run on its own thread for the test's blocking clients.
struct running_server {
  explicit running_server(web_handler h, web_server_limits limits = {}) {
    tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
    port = a.local_endpoint().port();
    server = std::make_shared<web_server>(std::move(a), std::move(h), limits, nullptr);
    server->start();
    thread = std::thread([this] { io.run(); });
  }
  ~running_server() {
    asio::post(io, [this] {
      server->stop();
      guard.reset();
    });
    thread.join();
  }
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  std::shared_ptr<web_server> server;
  std::uint16_t port = 0;
  std::thread thread;
};

tcp::socket connect(asio::io_context& io, std::uint16_t port) {
  tcp::socket s(io);
  s.connect({asio::ip::address_v4::loopback(), port});
  return s;
}

// Everything the server sends until it closes the connection.
std::string read_all(tcp::socket& s) {
  std::string answer;
  boost::system::error_code ec;
  char buf[4096];
  while (!ec) {
    const auto n = s.read_some(asio::buffer(buf), ec);
    answer.append(buf, n);
  }
  return answer;
}

web_response echo(const web_request& r) {
  web_response out;
  out.content_type = "text/plain";
  out.body = r.method + " " + r.target + " " + r.authorization.value_or("-");
  out.headers.emplace_back("X-Test", "yes");
  return out;
}

}  // namespace

TEST_CASE("web_server answers with the handler's status, headers and body, kept alive",
          "[unit][web_server]") {
  running_server srv(echo);
  asio::io_context io;
  auto s = connect(io, srv.port);
  asio::write(s, asio::buffer(std::string("GET /a?b=1 HTTP/1.1\r\nHost: x\r\n"
                                          "Authorization: Bearer t\r\n\r\n"
                                          "GET /second HTTP/1.1\r\nHost: x\r\n"
                                          "Connection: close\r\n\r\n")));
  const auto both = read_all(s);
  CHECK(both.rfind("HTTP/1.1 200", 0) == 0);
  CHECK_THAT(both, Catch::Contains("X-Test: yes\r\n"));
  CHECK_THAT(both, Catch::Contains("Content-Type: text/plain\r\n"));
  CHECK_THAT(both, Catch::Contains("\r\n\r\nGET /a?b=1 Bearer tHTTP/1.1 200"));
  CHECK_THAT(both, Catch::EndsWith("\r\n\r\nGET /second -"));
}

TEST_CASE("web_server refuses bodies and turns a throwing handler into a 500",
          "[unit][web_server]") {
  running_server srv([](const web_request& r) -> web_response {
    if (r.target == "/throw") throw std::runtime_error("boom");
    return echo(r);
  });
  asio::io_context io;
  auto s = connect(io, srv.port);
  asio::write(s, asio::buffer(
                     std::string("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")));
  const auto refused = read_all(s);
  CHECK(refused.rfind("HTTP/1.1 413", 0) == 0);
  auto t = connect(io, srv.port);
  asio::write(t, asio::buffer(std::string("GET /throw HTTP/1.1\r\nConnection: close\r\n\r\n")));
  const auto thrown = read_all(t);
  CHECK(thrown.rfind("HTTP/1.1 500", 0) == 0);
  CHECK_THAT(thrown, Catch::Contains("internal error: boom"));
  auto u = connect(io, srv.port);
  asio::write(u, asio::buffer(std::string("NOT HTTP AT ALL\r\n\r\n")));
  CHECK(read_all(u).rfind("HTTP/1.1 400", 0) == 0);
}

TEST_CASE("web_server closes idle connections after the header timeout", "[unit][web_server]") {
  web_server_limits limits;
  limits.header_timeout = 200ms;
  running_server srv(echo, limits);
  asio::io_context io;
  auto s = connect(io, srv.port);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(read_all(s).empty());  // closed silently: nobody asked anything
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("past max_sessions the longest-idle connection makes room", "[unit][web_server]") {
  web_server_limits limits;
  limits.max_sessions = 2;
  running_server srv(echo, limits);
  asio::io_context io;
  auto first = connect(io, srv.port);
  std::this_thread::sleep_for(50ms);
  auto second = connect(io, srv.port);
  std::this_thread::sleep_for(50ms);
  auto third = connect(io, srv.port);
  asio::write(third, asio::buffer(std::string("GET /3 HTTP/1.1\r\nConnection: close\r\n\r\n")));
  CHECK_THAT(read_all(third), Catch::EndsWith("GET /3 -"));
  CHECK(read_all(first).empty());  // the oldest idle one was closed for it
  asio::write(second, asio::buffer(std::string("GET /2 HTTP/1.1\r\nConnection: close\r\n\r\n")));
  CHECK_THAT(read_all(second), Catch::EndsWith("GET /2 -"));
}
