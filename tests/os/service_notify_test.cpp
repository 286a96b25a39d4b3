#include "os/service_notify.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/datagram_protocol.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;
using boost::asio::local::datagram_protocol;

TEST_CASE("notify messages reach a NOTIFY_SOCKET listener in order", "[unit][notify]") {
  const auto path = fs::temp_directory_path() / "baton-notify-test.sock";
  fs::remove(path);
  boost::asio::io_context io;
  datagram_protocol::socket sock(io, datagram_protocol::endpoint(path.string()));
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  REQUIRE(baton::os::notify_enabled());
  REQUIRE(baton::os::notify_ready("1 job running\nsecond line"));
  REQUIRE(baton::os::notify_watchdog());
  REQUIRE(baton::os::notify_extend_timeout(std::chrono::seconds(5)));
  REQUIRE(baton::os::notify_stopping("stopping"));
  std::vector<std::string> got;
  char buf[4096];
  for (int i = 0; i < 4; ++i) {
    const auto n = sock.receive(boost::asio::buffer(buf));
    got.emplace_back(buf, n);
  }
  CHECK(got == std::vector<std::string>{"READY=1\nSTATUS=1 job running second line", "WATCHDOG=1",
                                        "EXTEND_TIMEOUT_USEC=5000000",
                                        "STOPPING=1\nSTATUS=stopping"});
  ::unsetenv("NOTIFY_SOCKET");
  CHECK_FALSE(baton::os::notify_enabled());
  CHECK(baton::os::notify_status("nobody listens"));  // a no-op, not an error
  fs::remove(path);
}

TEST_CASE("RELOADING=1 carries the monotonic time Type=notify-reload asks for", "[unit][notify]") {
  const auto path = fs::temp_directory_path() / "baton-notify-reload-test.sock";
  fs::remove(path);
  boost::asio::io_context io;
  datagram_protocol::socket sock(io, datagram_protocol::endpoint(path.string()));
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  const auto before = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  REQUIRE(baton::os::notify_reloading("reloading settings"));
  char buf[4096];
  const std::string got(buf, sock.receive(boost::asio::buffer(buf)));
  ::unsetenv("NOTIFY_SOCKET");
  fs::remove(path);
  const std::string head = "RELOADING=1\nMONOTONIC_USEC=";
  REQUIRE(got.rfind(head, 0) == 0);
  const auto nl = got.find('\n', head.size());
  REQUIRE(nl != std::string::npos);
  // steady_clock is CLOCK_MONOTONIC on Linux: the stamp is not before the test's own reading.
  CHECK(std::stoll(got.substr(head.size(), nl - head.size())) >= before);
  CHECK(got.substr(nl) == "\nSTATUS=reloading settings");
}
