// The fork server's supervisor side on Linux: a SOCK_SEQPACKET socketpair to the parent
// (python/baton/preload.py), one JSON message per packet, the shard's stdio passed with
// SCM_RIGHTS, and the shard adopted from the parent's cgroup into the job's
// (posix_detail::adopt). Wire format: protocol/README.md, "Fork server".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "os/posix/process_internal.h"
#include "os/preload_server.h"

namespace baton::os {

namespace {

using posix_detail::unique_fd;
using json = nlohmann::json;

constexpr std::size_t max_message_bytes = 64 << 10;   // a reply; the parent's are a few bytes
constexpr std::size_t max_request_bytes = 128 << 10;  // what preload.py takes (MAX_REQUEST_BYTES)

error errno_error(const std::string& what, int err) {
  return make_error(what + ": " + std::strerror(err));
}

status send_message(int sock, const std::string& text, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    if (::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(text.size())) return {};
    if (errno == EINTR) continue;
    return errno_error("send to the fork server", errno);
  }
}

// The next message, waiting up to `timeout`. Any fds that come with it are closed: the server
// has none to give.
result<std::string> receive_message(int sock, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{sock, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("wait for the fork server", errno);
    if (n == 0) {
      return make_error("the fork server did not answer within " + std::to_string(timeout.count()) +
                        " ms");
    }
    break;
  }
  std::string buf(max_message_bytes, '\0');
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return errno_error("read from the fork server", errno);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      ::close(fd);
    }
  }
  if (got == 0)
    return make_error("the fork server closed its socket (it exited: see the job's log)");
  if ((msg.msg_flags & MSG_TRUNC) != 0) {
    return make_error("the fork server sent a message over " + std::to_string(max_message_bytes) +
                      " bytes");
  }
  buf.resize(static_cast<std::size_t>(got));
  return buf;
}

// The message as a JSON object; a clear error naming where it breaks otherwise.
result<json> parse_object(const std::string& text, const std::string& what) {
  auto shown = text.substr(0, 200);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return make_error(what + " is not JSON: " + shown);
  if (!j.is_object()) return make_error(what + " is not a JSON object: " + shown);
  return j;
}

// {"error": "..."} as an error value; anything else as nullopt.
std::optional<error> error_in(const json& j, const std::string& what) {
  const auto e = j.find("error");
  if (e == j.end()) return std::nullopt;
  if (!e->is_string()) return make_error(what + ": \"error\" is not a string");
  return make_error(e->get<std::string>());
}

}  // namespace

struct preload_server::impl {
  explicit impl(boost::asio::io_context& io) : ready_wait(io), ready_timer(io) {}
  std::unique_ptr<process> parent;
  unique_fd sock;
  std::string own_group;  // the parent's containment group: "<job>/preload"
  std::shared_ptr<bool> exited = std::make_shared<bool>(false);
  bool broken = false;
  boost::asio::posix::stream_descriptor ready_wait;  // a dup of `sock`, for async_wait_ready
  boost::asio::steady_timer ready_timer;
  std::function<void(status)> on_ready;
  bool destroyed = false;

  // The first message, read once it has come (or the wait's failure): on_ready's one call.
  void finish_ready(const status& waited) {
    ready_timer.cancel();
    boost::system::error_code ignored;
    ready_wait.close(ignored);
    auto done = std::exchange(on_ready, nullptr);
    if (destroyed || !done) return;
    status s = waited ? read_ready() : waited;
    if (!s) broken = true;
    done(s);
  }

  status read_ready() {
    auto text = receive_message(sock.get(), std::chrono::milliseconds(0));
    if (!text) return with_context("worker.preload", text.error());
    auto j = parse_object(*text, "its first message");
    if (!j) return with_context("worker.preload", j.error());
    // preload.py's own words, which start with "worker.preload: ".
    if (auto e = error_in(*j, "its first message")) return *e;
    if (const auto r = j->find("ready"); r == j->end() || *r != true) {
      return make_error("worker.preload: its first message is neither ready nor an error: " +
                        text->substr(0, 200));
    }
    return {};
  }
};

preload_server::preload_server(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

preload_server::~preload_server() {
  impl_->destroyed = true;
  impl_->on_ready = nullptr;
  impl_->ready_timer.cancel();
  boost::system::error_code ignored;
  impl_->ready_wait.close(ignored);
  // End of file on its socket ends the parent's loop; the parent's `process` then kills its
  // group and empties its cgroup, idle children included.
  impl_->sock.reset();
  impl_->parent.reset();
}

std::int64_t preload_server::pid() const { return impl_->parent->pid(); }

bool preload_server::usable() const { return !impl_->broken && !*impl_->exited; }

result<std::unique_ptr<preload_server>> preload_server::start(
    boost::asio::io_context& io, const spawn_options& options,
    const std::vector<std::string>& modules) {
  if (options.argv.empty()) return make_error("worker.preload: no interpreter to start");
  if (options.group.empty()) return make_error("worker.preload: the fork server needs a job group");
  if (const auto c = current_containment(); c.mode != "cgroup") {
    return make_error(
        "worker.preload needs cgroup containment (each shard is moved into the job's cgroup "
        "before it runs), and this supervisor has " +
        c.mode + ": " + c.detail);
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return errno_error("worker.preload: socketpair", errno);
  }
  auto p = std::make_shared<impl>(io);
  p->sock.reset(sv[0]);
  unique_fd theirs(sv[1]);
  p->own_group = options.group + "/preload";
  spawn_options o = options;
  o.group = p->own_group;
  o.argv = {options.argv.front(), "-m", "baton.preload", "--fd", std::to_string(theirs.get())};
  for (const auto& m : modules) {
    o.argv.push_back("--import");
    o.argv.push_back(m);
  }
  auto parent = posix_detail::spawn_keeping_fd(io, o, theirs.get());
  if (!parent) return with_context("worker.preload: start the fork server", parent.error());
  theirs.reset();
  p->parent = std::move(*parent);
  // It prints nothing of its own on stdout (each shard has its own pipes), but whatever an
  // import prints must not fill the pipe and block it.
  p->parent->async_read_lines([](const boost::system::error_code&, std::string_view) {});
  p->parent->async_wait(
      [exited = p->exited](const boost::system::error_code&, exit_status) { *exited = true; });
  return std::unique_ptr<preload_server>(new preload_server(std::move(p)));
}

void preload_server::async_wait_ready(std::chrono::milliseconds timeout,
                                      std::function<void(status)> on_ready) {
  auto& s = *impl_;
  s.on_ready = std::move(on_ready);
  const int fd = ::fcntl(s.sock.get(), F_DUPFD_CLOEXEC, 0);
  boost::system::error_code ec;
  if (fd >= 0) s.ready_wait.assign(fd, ec);
  if (fd < 0 || ec) {
    if (fd >= 0 && ec) ::close(fd);
    const auto why = fd < 0 ? std::string(std::strerror(errno)) : ec.message();
    boost::asio::post(s.ready_timer.get_executor(), [weak = std::weak_ptr<impl>(impl_), why] {
      if (auto p = weak.lock()) p->finish_ready(make_error("worker.preload: wait: " + why));
    });
    return;
  }
  std::weak_ptr<impl> weak = impl_;
  s.ready_wait.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          [weak](const boost::system::error_code& e) noexcept {
                            auto p = weak.lock();
                            if (!p || e == boost::asio::error::operation_aborted) return;
                            if (e) {
                              p->finish_ready(make_error("worker.preload: wait: " + e.message()));
                            } else {
                              p->finish_ready({});
                            }
                          });
  s.ready_timer.expires_after(timeout);
  s.ready_timer.async_wait([weak, timeout](const boost::system::error_code& e) noexcept {
    auto p = weak.lock();
    if (!p || e) return;
    p->finish_ready(make_error("worker.preload: the fork server was not ready within " +
                               std::to_string(timeout.count()) + " ms (its imports)"));
  });
}

result<std::unique_ptr<process>> preload_server::fork_worker(boost::asio::io_context& io,
                                                             const spawn_options& options,
                                                             std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  if (!usable()) {
    return make_error(*s.exited ? "worker.preload: the fork server has exited"
                                : "worker.preload: the fork server failed before");
  }
  if (options.argv.size() < 2)
    return make_error("worker.preload: argv must be [python, script, ...]");
  const std::string who = "worker.preload: fork " + options.argv[1];
  auto fail = [&](const error& e) -> error {
    s.broken = true;
    return with_context(who, e);
  };
  auto stdio = posix_detail::make_worker_stdio(io, options, who);
  if (!stdio) return stdio.error();
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return errno_error(who + ": pipe", errno);
  unique_fd go_read(go[0]), go_write(go[1]);

  std::error_code ec;
  const auto cwd =
      options.working_dir.empty() ? std::filesystem::current_path(ec) : options.working_dir;
  const json request = {{"argv", options.argv},
                        {"env", posix_detail::worker_environment(options)},
                        {"cwd", cwd.string()},
                        {"supervisor_pid", static_cast<std::int64_t>(::getpid())}};
  const std::string text = request.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > max_request_bytes) {
    return make_error(who + ": the request is " + std::to_string(text.size()) +
                      " bytes (argv and environment), more than the fork server takes (" +
                      std::to_string(max_request_bytes) + ")");
  }
  const auto& io_fds = **stdio;
  if (auto sent = send_message(
          s.sock.get(), text,
          {io_fds.child_in.get(), io_fds.child_out.get(), io_fds.child_err.get(), go_read.get()});
      !sent) {
    return fail(sent.error());
  }
  go_read.reset();
  auto reply = receive_message(s.sock.get(), timeout);
  if (!reply) return fail(reply.error());
  auto j = parse_object(*reply, "its reply");
  if (!j) return fail(j.error());
  if (auto e = error_in(*j, "its reply")) return fail(*e);
  const auto pid_field = j->find("pid");
  if (pid_field == j->end() || !pid_field->is_number_integer() || *pid_field <= 1 ||
      *pid_field > std::numeric_limits<std::int32_t>::max()) {
    return fail(make_error("its reply has no valid \"pid\": " + reply->substr(0, 200)));
  }
  const auto pid = pid_field->get<std::int64_t>();
  auto adopted = posix_detail::adopt(io, pid, std::move(*stdio), options, s.own_group);
  if (!adopted) {
    // Our child or not, it is not let go: without the byte on `go` it exits (126) at once.
    go_write.reset();
    return fail(adopted.error());
  }
  // Contained now: let it run the trainer. A failed write means it died already, which its
  // `process` reports as the exit it is.
  const char byte = 1;
  (void)!::write(go_write.get(), &byte, 1);
  return adopted;
}

}  // namespace baton::os
