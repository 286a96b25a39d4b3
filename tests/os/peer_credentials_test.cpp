#include "os/peer_credentials.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;

TEST_CASE("peer credentials of a socketpair are our own", "[unit][peer_credentials]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  auto c = baton::os::get_peer_credentials(fds[0]);
  REQUIRE(c);
  CHECK(c->uid == ::geteuid());
  CHECK(c->gid == ::getegid());
  CHECK(c->pid == ::getpid());
  std::vector<gid_t> ours(static_cast<std::size_t>(::getgroups(0, nullptr)));
  ::getgroups(static_cast<int>(ours.size()), ours.data());
  std::vector<std::uint32_t> expected(ours.begin(), ours.end());
  auto got = c->groups;
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  CHECK(got == expected);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("peer credentials of a non-socket are an error", "[unit][peer_credentials]") {
  auto c = baton::os::get_peer_credentials(-1);
  REQUIRE_FALSE(c);
  CHECK(c.error().message == "cannot read peer credentials (SO_PEERCRED): Bad file descriptor");
}

TEST_CASE("groups are found by name", "[unit][peer_credentials]") {
  auto root = baton::os::find_group("root");
  REQUIRE(root);
  CHECK(*root == 0);
  auto missing = baton::os::find_group("no-such-group-baton");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "group 'no-such-group-baton' does not exist");
  CHECK(baton::os::current_uid() == ::geteuid());
}

TEST_CASE("users are found by uid, and a uid with no account is no error",
          "[unit][peer_credentials]") {
  auto root = baton::os::find_user(0);
  REQUIRE(root);
  REQUIRE(*root);
  CHECK((*root)->name == "root");
  CHECK((*root)->home == "/root");
  CHECK_FALSE((*root)->shell.empty());
  // Debian gives no account an id this high (useradd stops at 60000, nobody is 65534).
  auto none = baton::os::find_user(4000000000u);
  REQUIRE(none);
  CHECK_FALSE(*none);
}

TEST_CASE("set_file_group changes a file's group and names the path on failure",
          "[unit][peer_credentials]") {
  const auto dir = fs::temp_directory_path() / "baton-peer-cred-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto file = dir / "f";
  std::ofstream(file) << "x";
  REQUIRE(baton::os::set_file_group(file, ::getegid()));
  auto s = baton::os::set_file_group(dir / "missing", ::getegid());
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "cannot give " + (dir / "missing").string() + " the group " +
                                 std::to_string(::getegid()) + ": No such file or directory");
  fs::remove_all(dir);
}
