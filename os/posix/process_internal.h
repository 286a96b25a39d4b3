// What the fork server (os/posix/preload_posix.cpp) needs of os/posix/process_posix.cpp, which
// stays the only file with Boost.Process in it: a worker's stdio made apart from its start, a
// spawn that leaves one more fd open, and the adoption of a process someone else forked.
// Internal to os/posix.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "os/process.h"

namespace baton::os::posix_detail {

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// One worker's stdio before it starts: the child's ends, handed to whatever starts it (the
// launcher, or a fork server over its socket) and then closed here so that end of file can
// come; and ours, which the worker's `process` takes.
struct worker_stdio {
  explicit worker_stdio(boost::asio::io_context& io) : out(io), in(io) {}
  unique_fd child_in, child_out, child_err;
  boost::asio::readable_pipe out;
  boost::asio::writable_pipe in;
  std::optional<boost::asio::readable_pipe> err;  // with spawn_options::on_stderr
  void close_child_ends() {
    child_in.reset();
    child_out.reset();
    child_err.reset();
  }
};

// Pipes for stdin and stdout, and for stderr a pipe (on_stderr) or the log file, as spawn makes
// them. `who` names the program in errors.
result<std::unique_ptr<worker_stdio>> make_worker_stdio(boost::asio::io_context& io,
                                                        const spawn_options& options,
                                                        const std::string& who);

// The environment a worker of `options` gets: the supervisor's, then options.env, then the
// group's mark (BATON_WORKER_GROUP) when it has a group. "NAME=value" strings.
std::vector<std::string> worker_environment(const spawn_options& options);

// spawn(), with `keep_fd` (one of ours) left open in the child under the same number.
result<std::unique_ptr<process>> spawn_keeping_fd(boost::asio::io_context& io,
                                                  const spawn_options& options, int keep_fd);

// Takes `pid` as a worker of group options.group, as if spawn had started it: `pid` must be a
// child of ours that nobody has reaped (a fork server's grandchild, re-parented to us as
// subreaper) and a member of cgroup group `from_group`. It is moved into options.group's cgroup
// and wrapped with our ends of `stdio` (stderr read to options.on_stderr). An error leaves it
// unregistered, to be killed by the caller.
result<std::unique_ptr<process>> adopt(boost::asio::io_context& io, std::int64_t pid,
                                       std::unique_ptr<worker_stdio> stdio,
                                       const spawn_options& options, const std::string& from_group);

}  // namespace baton::os::posix_detail
