#include "supervisor/socket_discovery.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

// Sockets by what a connection to them would find.
struct table_probe final : socket_probe {
  std::set<std::string> present;
  std::set<std::string> answering;
  mutable int connects = 0;
  bool exists(const fs::path& p) const override { return present.count(p.string()) > 0; }
  bool accepts(const fs::path& p) const override {
    ++connects;
    return answering.count(p.string()) > 0;
  }
};

const std::string own = "/run/user/1000/baton/baton.sock";
const std::string sys = "/run/baton/baton.sock";

socket_search user_search() {
  socket_search s;
  s.own_socket = own;
  s.system_socket = sys;
  return s;
}

}  // namespace

TEST_CASE("the --socket flag, then BATON_SOCKET, win without a look at any socket",
          "[unit][socket_discovery]") {
  table_probe probe;
  probe.present = {own};
  probe.answering = {own};
  auto s = user_search();
  s.flag = "/x/flag.sock";
  s.env_socket = "/x/env.sock";
  CHECK(discover_socket(s, probe).path == "/x/flag.sock");
  s.flag.clear();
  CHECK(discover_socket(s, probe).path == "/x/env.sock");
  CHECK(probe.connects == 0);
  s.env_socket = "";  // BATON_SOCKET= is as if unset
  CHECK(discover_socket(s, probe).path == own);
}

TEST_CASE("the user's own daemon wins only if its socket exists and answers",
          "[unit][socket_discovery]") {
  table_probe probe;
  const auto s = user_search();
  auto c = discover_socket(s, probe);  // no own socket: the system one
  CHECK(c.path == sys);
  REQUIRE(c.passed.size() == 1);
  CHECK(c.passed[0] == own + " (your own daemon's socket: not there)");
  CHECK(probe.connects == 0);

  probe.present = {own};  // a stale socket file of a daemon that died
  c = discover_socket(s, probe);
  CHECK(c.path == sys);
  CHECK(c.passed.at(0) == own + " (your own daemon's socket: nothing answers on it)");

  probe.answering = {own};
  c = discover_socket(s, probe);
  CHECK(c.path == own);
  CHECK(c.passed.empty());
}

TEST_CASE("root's own daemon is the system one, looked at once", "[unit][socket_discovery]") {
  table_probe probe;
  socket_search s;
  s.own_socket = sys;
  s.system_socket = sys;
  const auto c = discover_socket(s, probe);
  CHECK(c.path == sys);
  CHECK(c.passed.empty());
  CHECK(probe.connects == 0);
}

TEST_CASE("when nothing answers, the error names every place looked at",
          "[unit][socket_discovery]") {
  table_probe probe;
  const auto c = discover_socket(user_search(), probe);
  CHECK(unreachable_message(c, "cannot connect to baton daemon at " + sys + ": No such file") ==
        "cannot connect to baton daemon at " + sys + ": No such file; also looked at " + own +
            " (your own daemon's socket: not there); pass --socket PATH or set BATON_SOCKET to "
            "name the daemon");
  // A socket the user named is the only place: the error is the connection's own.
  socket_search named = user_search();
  named.flag = "/x/flag.sock";
  CHECK(unreachable_message(discover_socket(named, probe), "boom") == "boom");
}
