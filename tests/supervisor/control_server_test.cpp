#include "supervisor/control_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "supervisor/control_client.h"
#include "support/skip.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

extern char** environ;

namespace {

// Answers like a daemon would, from memory, and records every call it got.
class fake_handler : public api_handler {
 public:
  api_response handle(const api_call& call) override {
    std::lock_guard lock(mutex_);
    calls_.push_back(call);
    if (const auto* s = std::get_if<submit_call>(&call)) {
      return {201, {{"id", s->spec.value("name", "job")}, {"base_dir", s->base_dir}}};
    }
    if (const auto* s = std::get_if<status_call>(&call)) {
      if (s->id == "boom") throw std::runtime_error("boom");
      if (s->id == "missing") return error_response(404, "no job 'missing'");
      return {200, {{"id", s->id}, {"state", "running"}}};
    }
    if (const auto* l = std::get_if<logs_call>(&call)) {
      return {200, {{"id", l->id}, {"offset", l->offset}, {"data", "step 1\n"}}};
    }
    if (const auto* c = std::get_if<cancel_call>(&call)) return {202, {{"id", c->id}}};
    if (std::holds_alternative<list_call>(call)) return {200, {{"jobs", nlohmann::json::array()}}};
    return {200, {{"status", "ok"}}};
  }
  // Answers every caller the same; records who asked (the daemon decides per job, not this).
  api_response handle(const api_call& call, const api_caller& caller) override {
    {
      std::lock_guard lock(mutex_);
      callers_.push_back(caller);
    }
    return handle(call);
  }
  std::vector<api_caller> callers() {
    std::lock_guard lock(mutex_);
    return callers_;
  }
  std::vector<api_call> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::vector<api_call> calls_;
  std::vector<api_caller> callers_;
};

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("baton-ctl-" + name);
  fs::remove_all(dir);
  return dir;
}

// A server on its own io thread. The destructor stops it from the io thread and joins: a session
// that failed to close would hang here, so every test also checks stop().
struct running_server {
  explicit running_server(const std::string& name, control_server_options o = {})
      : dir(scratch(name)), server(io, handler, with_path(std::move(o))) {
    auto s = server.start();
    REQUIRE(s);
    thread = std::thread([this] { io.run(); });
  }
  ~running_server() {
    stop();
    fs::remove_all(dir);
  }
  void stop() {
    if (!thread.joinable()) return;
    boost::asio::post(io, [this] { server.stop(); });
    thread.join();
  }
  control_server_options with_path(control_server_options o) {
    o.socket_path = dir / "run" / "baton.sock";
    return o;
  }
  fs::path socket() const { return dir / "run" / "baton.sock"; }

  fs::path dir;
  boost::asio::io_context io;
  fake_handler handler;
  control_server server;
  std::thread thread;
};

api_response must_call(const fs::path& socket, std::string_view method, std::string_view target,
                       const nlohmann::json& body = nullptr) {
  auto r = control_client::call(socket, method, target, body, 5s);
  REQUIRE(r);
  return *r;
}

// connect_raw without Catch (which is not thread-safe), for helper threads: -1 on failure.
int connect_quiet(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_raw(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Reads until EOF (or an error such as a reset), waiting at most `limit` overall.
std::string read_until_closed(int fd, std::chrono::milliseconds limit = 5s) {
  std::string out;
  const auto deadline = clock_type::now() + limit;
  char buf[4096];
  while (clock_type::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left.count(), 1))) <= 0) continue;
    const auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
  FAIL("connection still open after " << limit.count() << " ms");
  return out;
}

std::string exchange_raw(const fs::path& path, const std::string& bytes) {
  const int fd = connect_raw(path);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
  ::shutdown(fd, SHUT_WR);  // the server sees EOF after our bytes
  auto out = read_until_closed(fd);
  ::close(fd);
  return out;
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::size_t count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("every route round-trips through the client", "[integration][control_server]") {
  running_server s("roundtrip");
  const auto health = must_call(s.socket(), "GET", "/v1/health");
  CHECK(health.status == 200);
  CHECK(health.body == nlohmann::json{{"status", "ok"}});

  const auto submit = must_call(s.socket(), "POST", "/v1/jobs",
                                {{"spec", {{"name", "mnist"}}}, {"base_dir", "/home/u/jobs"}});
  CHECK(submit.status == 201);
  CHECK(submit.body == nlohmann::json{{"id", "mnist"}, {"base_dir", "/home/u/jobs"}});

  CHECK(must_call(s.socket(), "GET", "/v1/jobs").body["jobs"] == nlohmann::json::array());
  CHECK(must_call(s.socket(), "GET", "/v1/jobs/mnist").body["state"] == "running");
  const auto logs = must_call(s.socket(), "GET", "/v1/jobs/mnist/logs?offset=42");
  CHECK(logs.body["offset"] == 42);
  CHECK(must_call(s.socket(), "POST", "/v1/jobs/mnist/cancel").status == 202);

  const auto missing = must_call(s.socket(), "GET", "/v1/jobs/missing");
  CHECK(missing.status == 404);
  CHECK(missing.body == nlohmann::json{{"error", "no job 'missing'"}});
  const auto route = must_call(s.socket(), "GET", "/v1/nope");
  CHECK(route.status == 404);
  CHECK(route.body["error"] == "unknown route /v1/nope");
  const auto method = must_call(s.socket(), "DELETE", "/v1/jobs");
  CHECK(method.status == 405);
  const auto boom = must_call(s.socket(), "GET", "/v1/jobs/boom");
  CHECK(boom.status == 500);
  CHECK(boom.body["error"] == "internal error in status: boom");

  const auto calls = s.handler.calls();
  REQUIRE(calls.size() == 8);  // routing errors never reach the handler
  const auto& sc = std::get<submit_call>(calls[1]);
  CHECK(sc.base_dir == "/home/u/jobs");
  CHECK(sc.peer_uid == ::geteuid());
  // The submitter's groups too, from the kernel: a job running as its submitter gets them.
  CHECK(sc.peer_gid == ::getegid());
}

TEST_CASE("socket is 0660 in a folder created 0750", "[integration][control_server]") {
  running_server s("modes");
  struct stat st {};
  REQUIRE(::lstat(s.socket().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK(mode_of(s.socket()) == 0660);
  CHECK(mode_of(s.socket().parent_path()) == 0750);
  s.stop();
  CHECK_FALSE(fs::exists(fs::symlink_status(s.socket())));  // stop() removes what start() made
}

TEST_CASE("an oversized body gets 413 and the server goes on", "[integration][control_server]") {
  running_server s("oversize");
  const std::string pad(max_request_body_bytes, 'x');
  const auto big = control_client::call(s.socket(), "POST", "/v1/jobs",
                                        {{"spec", {{"pad", pad}}}, {"base_dir", "/"}}, 5s);
  REQUIRE(big);
  CHECK(big->status == 413);
  CHECK(big->body["error"] == "request body exceeds the limit of 1048576 bytes");
  // Just under the limit is fine.
  const std::string fits(max_request_body_bytes - 100, 'x');
  CHECK(must_call(s.socket(), "POST", "/v1/jobs", {{"spec", {{"pad", fits}}}, {"base_dir", "/"}})
            .status == 201);
  CHECK(must_call(s.socket(), "GET", "/v1/health").status == 200);
}

TEST_CASE("deeply nested JSON is 400", "[integration][control_server]") {
  running_server s("deep");
  nlohmann::json deep = 1;
  for (int i = 0; i < 100; ++i) deep = nlohmann::json::array({deep});
  const auto r = must_call(s.socket(), "POST", "/v1/jobs", {{"spec", deep}, {"base_dir", "/"}});
  CHECK(r.status == 400);
  CHECK(r.body["error"] == "JSON nested deeper than 64 levels");
  CHECK(s.handler.calls().empty());
}

TEST_CASE("malformed HTTP gets 400 and a closed connection", "[integration][control_server]") {
  running_server s("malformed");
  const auto junk = exchange_raw(s.socket(), std::string("\x01\x02 garbage\r\n\r\n", 15));
  CHECK(junk.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(junk.find(R"({"error":"malformed HTTP request: bad method"})") != std::string::npos);
  const auto length =
      exchange_raw(s.socket(), "POST /v1/jobs HTTP/1.1\r\nContent-Length: abc\r\n\r\n");
  CHECK(length.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(length.find("malformed HTTP request: bad Content-Length") != std::string::npos);
  CHECK(exchange_raw(s.socket(), "GET /v1/health HTTP/1.1\r\n").empty());  // EOF mid-header
  CHECK(must_call(s.socket(), "GET", "/v1/health").status == 200);
}

TEST_CASE("keep-alive serves several requests on one connection", "[integration][control_server]") {
  running_server s("keepalive");
  const auto out = exchange_raw(s.socket(),
                                "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
                                "GET /v1/jobs/a HTTP/1.1\r\nHost: x\r\n\r\n"
                                "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(count(out, "HTTP/1.1 200 OK\r\n") == 3);
  CHECK(s.handler.calls().size() == 3);
}

TEST_CASE("a silent client is dropped after the timeout while others are served",
          "[integration][control_server]") {
  control_server_options o;
  o.read_timeout = 300ms;
  running_server s("timeout", o);
  const auto start = clock_type::now();
  const int silent = connect_raw(s.socket());
  CHECK(must_call(s.socket(), "GET", "/v1/health").status == 200);
  CHECK(read_until_closed(silent).empty());  // closed by the server, nothing said
  CHECK(clock_type::now() - start >= 250ms);
  ::close(silent);

  // Trickling a byte at a time does not extend the deadline: it covers the whole request.
  const int slow = connect_raw(s.socket());
  const auto slow_start = clock_type::now();
  bool dropped = false;
  for (int i = 0; i < 40 && !dropped; ++i) {
    dropped = ::send(slow, "G", 1, MSG_NOSIGNAL) != 1;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(dropped);
  CHECK(clock_type::now() - slow_start < 1500ms);
  ::close(slow);
}

TEST_CASE("a connection past the limit takes the slot of the longest-idle one, which gets 503",
          "[integration][control_server]") {
  // 65 idle connections once locked everyone out ("too many connections ... (limit 64)").
  control_server_options o;
  o.max_sessions = 3;
  o.max_sessions_per_uid = 2;
  running_server s("limit", o);
  const int a = connect_raw(s.socket());
  std::this_thread::sleep_for(20ms);
  const int b = connect_raw(s.socket());
  std::this_thread::sleep_for(20ms);
  const auto served = must_call(s.socket(), "GET", "/v1/health");
  CHECK(served.status == 200);
  // The oldest idle one made room, with a message rather than a reset.
  const auto evicted = read_until_closed(a);
  CHECK_THAT(evicted, Catch::StartsWith("HTTP/1.1 503"));
  const auto uid = std::to_string(::geteuid());
  CHECK_THAT(evicted, Catch::Contains("{\"error\":\"the baton daemon closed this idle connection "
                                      "to make room: too many connections from uid " +
                                      uid + " (limit 2 per user); try again\",\"retry\":true}"));
  ::close(a);
  ::close(b);
}

TEST_CASE("when every slot is busy with a request, a newcomer gets a clear 503",
          "[integration][control_server]") {
  control_server_options o;
  o.max_sessions = 3;
  o.max_sessions_per_uid = 2;
  running_server s("busy", o);
  // Headers complete, bodies still coming: busy, not idle, so nobody can be evicted.
  const std::string partial = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{";
  // Two fill the uid's slots; four more whose requests were there at once are still served past
  // the limit (up to twice max_sessions), so six busy ones leave no way in.
  std::vector<int> busy;
  for (int tries = 0; busy.size() < 6 && tries < 50; ++tries) {
    const int fd = connect_raw(s.socket());
    REQUIRE(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(partial.size()));
    std::this_thread::sleep_for(30ms);
    // Accepted before its bytes came, it was refused (and answered): not busy, try again.
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      ::close(fd);
    } else {
      busy.push_back(fd);
    }
  }
  REQUIRE(busy.size() == 6);
  std::this_thread::sleep_for(100ms);
  const auto refused = must_call(s.socket(), "GET", "/v1/health");
  CHECK(refused.status == 503);
  CHECK(refused.body["error"] == "too many connections from uid " + std::to_string(::geteuid()) +
                                     " (limit 2 per user); try again");
  ::close(busy[0]);
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = must_call(s.socket(), "GET", "/v1/health").status;
    if (status != 200) std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 200);
  for (std::size_t i = 1; i < busy.size(); ++i) ::close(busy[i]);
}

TEST_CASE("an idle connection is closed after the header timeout, a slow body after the read one",
          "[integration][control_server]") {
  control_server_options o;
  o.header_timeout = 300ms;
  o.read_timeout = 1500ms;
  running_server s("header-timeout", o);
  const auto start = clock_type::now();
  const int idle = connect_raw(s.socket());
  CHECK(read_until_closed(idle).empty());  // nobody asked anything: closed silently
  const auto idle_for = clock_type::now() - start;
  CHECK(idle_for >= 250ms);
  CHECK(idle_for < 1200ms);
  ::close(idle);
  // Its header in time, the body may take the rest of the request's deadline.
  const int slow = connect_raw(s.socket());
  const std::string head =
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n";
  REQUIRE(::send(slow, head.data(), head.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(head.size()));
  std::this_thread::sleep_for(600ms);  // past the header timeout, within the read timeout
  REQUIRE(::send(slow, "{}", 2, MSG_NOSIGNAL) == 2);
  const auto answer = read_until_closed(slow);
  CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 400"));  // answered (a body without a spec)
  ::close(slow);
}

TEST_CASE("500 idle connections of the owner's uid: the owner still gets answers within 1 s",
          "[integration][control_server]") {
  running_server s("flood");  // the defaults: 256 in all, 32 per uid, 5 s header timeout
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) idle.push_back(connect_raw(s.socket()));
  for (int i = 0; i < 20; ++i) {
    const auto t0 = clock_type::now();
    auto r = control_client::call(s.socket(), "GET", "/v1/health", nullptr, 1s);
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(clock_type::now() - t0 < 1s);
  }
  // The ones that made room were told why; at most one uid's share is still held.
  int told = 0;
  for (const int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      char buf[512];
      const auto n = ::read(fd, buf, sizeof buf);
      if (n > 0 && std::string(buf, static_cast<std::size_t>(n)).rfind("HTTP/1.1 503", 0) == 0) {
        ++told;
      }
    }
    ::close(fd);
  }
  CHECK(told >= 500 - 32);
}

TEST_CASE("a client reconnecting in a loop does not keep the daemon unreachable",
          "[integration][control_server]") {
  running_server s("reconnect");
  std::atomic<bool> done{false};
  // 64 clients (more than one uid's share) that each reconnect the moment their connection is
  // closed, evicted or timed out, and never send a thing: they keep evicting each other.
  std::atomic<int> reconnects{0};
  std::thread churn([&] {
    std::vector<pollfd> fds;
    for (int i = 0; i < 64; ++i) fds.push_back({connect_quiet(s.socket()), POLLIN, 0});
    while (!done) {
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (auto& p : fds) {
        if (p.revents == 0) continue;
        if (p.fd >= 0) ::close(p.fd);
        p.fd = connect_quiet(s.socket());
        p.revents = 0;
        ++reconnects;
      }
    }
    for (const auto& p : fds) {
      if (p.fd >= 0) ::close(p.fd);
    }
  });
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 20; ++i) {
    const auto t0 = clock_type::now();
    auto r = control_client::call(s.socket(), "GET", "/v1/health", nullptr, 1s);
    CHECK(r);
    if (r) CHECK(r->status == 200);
    CHECK(clock_type::now() - t0 < 1s);
  }
  done = true;
  churn.join();
  CHECK(reconnects > 20);  // the loop really ran against the limits
}

TEST_CASE("stop() closes live sessions at once", "[integration][control_server]") {
  running_server s("stop");  // default 10 s read timeout
  const int idle = connect_raw(s.socket());
  CHECK(must_call(s.socket(), "GET", "/v1/health").status == 200);
  const auto start = clock_type::now();
  s.stop();
  CHECK(clock_type::now() - start < 2s);
  CHECK(read_until_closed(idle, 1s).empty());
  ::close(idle);
}

TEST_CASE("a second server on the same path is refused, stale sockets are replaced",
          "[integration][control_server]") {
  running_server first("second");
  boost::asio::io_context io;
  fake_handler handler;
  control_server_options o;
  o.socket_path = first.socket();
  control_server second(io, handler, o);
  auto st = second.start();
  REQUIRE_FALSE(st);
  CHECK(st.error().message == "another baton daemon is listening on " + first.socket().string());
  CHECK(must_call(first.socket(), "GET", "/v1/health").status == 200);  // undisturbed
  second.stop();
  CHECK(fs::exists(first.socket()));  // the loser does not remove the winner's socket

  // A socket file left by a killed daemon: bound, never listened, closed.
  const auto dir = scratch("stale");
  fs::create_directories(dir);
  const auto stale = dir / "baton.sock";
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, stale.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
  }
  o.socket_path = stale;
  control_server third(io, handler, o);
  REQUIRE(third.start());
  third.stop();

  std::ofstream(stale) << "not a socket";
  control_server fourth(io, handler, o);
  auto st4 = fourth.start();
  REQUIRE_FALSE(st4);
  CHECK(st4.error().message == stale.string() + " exists and is not a socket; not removing it");
  CHECK(fs::is_regular_file(stale));
  fs::remove_all(dir);
}

TEST_CASE("a missing group is a clear start error", "[integration][control_server]") {
  boost::asio::io_context io;
  fake_handler handler;
  control_server_options o;
  o.socket_path = scratch("nogroup") / "baton.sock";
  o.group = "no-such-group-baton";
  control_server server(io, handler, o);
  auto st = server.start();
  REQUIRE_FALSE(st);
  CHECK(st.error().message ==
        "control socket group: group 'no-such-group-baton' does not exist (create it with "
        "groupadd, or start without a group)");
  CHECK_FALSE(fs::exists(o.socket_path));
}

TEST_CASE("client errors say what is wrong", "[integration][control_server]") {
  const auto dir = scratch("client");
  fs::create_directories(dir);
  const auto none = control_client::call(dir / "none.sock", "GET", "/v1/health");
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "cannot connect to baton daemon at " +
                                    (dir / "none.sock").string() +
                                    ": No such file or directory (is `baton serve` running?)");

  // A listener that never accepts nor answers.
  const auto mute = dir / "mute.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, mute.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  const auto slow = control_client::call(mute, "GET", "/v1/health", nullptr, 200ms);
  REQUIRE_FALSE(slow);
  CHECK(slow.error().message ==
        "baton daemon at " + mute.string() + " did not answer within 200 ms");
  ::close(fd);
  fs::remove_all(dir);
}

namespace {

// Connects as another user from a forked child and returns the raw answer. Only system calls
// after fork(): the parent has threads, so the child must not touch locks or the heap.
std::string exchange_as(const fs::path& socket, uid_t uid, gid_t gid, std::vector<gid_t> groups) {
  const std::string request = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(out[0]);
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
        ::setuid(uid) != 0) {
      ::_exit(10);
    }
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(11);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) ::_exit(12);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) {
      if (::write(out[1], buf, static_cast<std::size_t>(n)) != n) ::_exit(13);
    }
    ::_exit(0);
  }
  ::close(out[1]);
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) answer.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return answer;
}

}  // namespace

TEST_CASE("foreign users are refused unless in the allowed group",
          "[integration][control_server]") {
  if (::geteuid() != 0) BATON_SKIP("switching to another uid needs root");
  control_server_options o;
  o.group = "daemon";
  running_server s("foreign", o);
  const gid_t daemon_gid = 1;
  const gid_t nogroup = 65534;
  struct stat st {};
  REQUIRE(::stat(s.socket().c_str(), &st) == 0);
  CHECK(st.st_gid == daemon_gid);
  CHECK(mode_of(s.socket()) == 0660);

  // In the group through a supplementary group, then through the primary gid: let in.
  CHECK(exchange_as(s.socket(), 65534, nogroup, {daemon_gid}).rfind("HTTP/1.1 200", 0) == 0);
  CHECK(exchange_as(s.socket(), 65534, daemon_gid, {}).rfind("HTTP/1.1 200", 0) == 0);

  // A stranger cannot reach the socket through the file modes; open them up to show that the
  // credential check holds on its own.
  fs::permissions(s.socket().parent_path(), fs::perms::all);
  fs::permissions(s.socket(), fs::perms::all);
  const auto refused = exchange_as(s.socket(), 65534, nogroup, {});
  CHECK(refused.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
  CHECK(refused.find(R"({"error":"permission denied: uid 65534 is not the daemon's user (uid 0) )"
                     R"(and not in group 'daemon'"})") != std::string::npos);
  CHECK(s.handler.calls().size() == 2);
  // Let in, but not privileged: the handler is told who they are.
  const auto callers = s.handler.callers();
  REQUIRE(callers.size() == 2);
  for (const auto& c : callers) {
    CHECK(c.uid == 65534);
    CHECK_FALSE(c.privileged);
  }
  CHECK(must_call(s.socket(), "GET", "/v1/health").status == 200);
  CHECK(s.handler.callers().back().privileged);  // root
}

TEST_CASE("a handler that keeps no owners serves only privileged callers",
          "[unit][control_server]") {
  struct plain final : api_handler {
    api_response handle(const api_call&) override { return {200, {{"status", "ok"}}}; }
  } h;
  api_handler& base = h;
  CHECK(base.handle(health_call{}, api_caller{0, true}).status == 200);
  const auto refused = base.handle(health_call{}, api_caller{1001, false});
  CHECK(refused.status == 403);
  CHECK(refused.body.value("error", "").find("uid 1001") != std::string::npos);
}

namespace {

// Runs argv (no shell) and returns its exit code and stdout.
std::pair<int, std::string> run_argv(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  REQUIRE(::pipe(out) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  REQUIRE(rc == 0);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

}  // namespace

TEST_CASE("curl --unix-socket works", "[integration][control_server]") {
  // curl is part of set-up (scripts/setup.sh installs it): missing, this test fails.
  REQUIRE(fs::exists("/usr/bin/curl"));
  running_server s("curl");
  const auto [rc, out] = run_argv(
      {"/usr/bin/curl", "-s", "--unix-socket", s.socket().string(), "http://localhost/v1/health"});
  CHECK(rc == 0);
  CHECK(out == "{\"status\":\"ok\"}\n");
  const auto [rc2, out2] =
      run_argv({"/usr/bin/curl", "-s", "--unix-socket", s.socket().string(), "-X", "POST", "-H",
                "Content-Type: application/json", "-d",
                R"({"spec":{"name":"c"},"base_dir":"/tmp"})", "http://localhost/v1/jobs"});
  CHECK(rc2 == 0);
  CHECK(nlohmann::json::parse(out2) == nlohmann::json{{"id", "c"}, {"base_dir", "/tmp"}});
}
