// POSIX process control on Boost.Process v2's default launcher (fork + exec), with a launcher
// initializer that puts the child in its own group and ties its life to the supervisor's.
// This is the only file that includes Boost.Process headers (each such file costs 10-15 s).
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_set>

#include "os/pipe_pump.h"
#include "os/posix/proc_stat.h"
#include "os/process.h"

extern char** environ;

namespace baton::os {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using boost::system::error_code;

namespace {

// Pids started by spawn() whose exit status belongs to their `process` object: reap_orphans()
// and kill_orphans() must leave them alone.
std::mutex registry_mutex;
std::unordered_set<std::int64_t> registry;

void register_pid(std::int64_t pid) {
  std::lock_guard lock(registry_mutex);
  registry.insert(pid);
}
void unregister_pid(std::int64_t pid) {
  std::lock_guard lock(registry_mutex);
  registry.erase(pid);
}
bool is_registered(std::int64_t pid) {
  std::lock_guard lock(registry_mutex);
  return registry.count(pid) != 0;
}

error errno_error(const std::string& what, int err) {
  return make_error(what + ": " + std::strerror(err));
}

class fd_guard {
 public:
  fd_guard() = default;
  explicit fd_guard(int fd) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Runs in the forked child before exec: only async-signal-safe calls from here on.
struct child_setup {
  const char* const* envp;
  const char* working_dir;  // nullptr: inherit
  pid_t parent;

  error_code on_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&,
                      const char* const*) {
    launcher.env = envp;
    return {};
  }

  error_code on_exec_setup(bp::posix::default_launcher&, const bp::filesystem::path&,
                           const char* const*) {
    // Own group, so signal_group reaches the worker's children but never the supervisor.
    if (::setpgid(0, 0) != 0) return error_code(errno, boost::system::system_category());
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      return error_code(errno, boost::system::system_category());
    }
    // The supervisor may have died between fork and prctl: then no death signal will ever come,
    // and the child has been re-parented. _exit, not exit: no atexit or stdio flush of the
    // parent's state in the child.
    if (::getppid() != parent) ::_exit(127);
    // The supervisor ignores SIGPIPE and may block signals; an ignored disposition and the mask
    // survive exec, and the worker must see the defaults.
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (working_dir != nullptr && ::chdir(working_dir) != 0) {
      return error_code(errno, boost::system::system_category());
    }
    // Nothing of the supervisor's but stdio may reach the worker: Asio opens its sockets without
    // close-on-exec, and Boost 1.81's close_all skips every fd below the launcher's own error
    // pipe (it compares each whitelist entry with itself), so the control socket leaked into
    // workers and a restarted daemon found it "still listening". Marked, not closed: the
    // launcher's error pipe must stay open until exec succeeds.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      rlimit lim{};
      const int top = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536
                          ? static_cast<int>(lim.rlim_cur)
                          : 65536;
      for (int fd = 3; fd < top; ++fd) (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    return {};
  }
};

// execve does no PATH search; do it here, in the parent, with the supervisor's PATH.
result<std::string> resolve_program(const std::string& name) {
  if (name.empty()) return make_error("spawn: argv[0] is empty");
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return make_error("spawn " + name + ": not found in PATH");
}

// The supervisor's environment with `extra` added, later entries replacing earlier ones.
std::vector<std::string> merged_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : extra) replaced = replaced || k == key;
    if (!replaced) out.emplace_back(entry);
  }
  for (std::size_t i = 0; i < extra.size(); ++i) {
    bool later = false;
    for (std::size_t j = i + 1; j < extra.size(); ++j)
      later = later || extra[j].first == extra[i].first;
    if (!later) out.push_back(extra[i].first + "=" + extra[i].second);
  }
  return out;
}

exit_status from_native(int native) {
  if (WIFSIGNALED(native)) return exit_status::signaled(WTERMSIG(native));
  return exit_status::exited(WEXITSTATUS(native));
}

// Freezes then kills a set of processes found by `find` (re-run until it finds nothing new), so
// nothing can fork its way out between the scan and the kill.
template <class Find>
result<int> stop_then_kill(Find find) {
  std::unordered_set<std::int64_t> stopped;
  std::vector<std::int64_t> order;
  for (int round = 0; round < 100; ++round) {
    auto table = procfs::list_processes();
    if (!table) return table.error();
    bool found_new = false;
    for (const auto pid : find(*table)) {
      if (!stopped.insert(pid).second) continue;
      found_new = true;
      order.push_back(pid);
      ::kill(static_cast<pid_t>(pid), SIGSTOP);  // ESRCH: already gone, fine
    }
    if (!found_new) break;
  }
  for (const auto pid : order) ::kill(static_cast<pid_t>(pid), SIGKILL);
  return static_cast<int>(order.size());
}

}  // namespace

class posix_process final : public process::impl,
                            public std::enable_shared_from_this<posix_process> {
 public:
  using child = bp::basic_process<asio::io_context::executor_type>;

  posix_process(child proc, asio::readable_pipe out, asio::writable_pipe in)
      : proc_(std::move(proc)), pipes_(std::move(out), std::move(in)), pid_(proc_.id()) {
    register_pid(pid_);
  }

  ~posix_process() override {
    // bp's destructor SIGKILLs and blocks on waitpid if the child was never reaped; it has been
    // killed by then (abandon), so the wait is short.
    if (!exited_) {
      error_code ec;
      proc_.terminate(ec);
    }
    unregister_pid(pid_);
  }

  std::int64_t pid() const override { return pid_; }
  bool exited() const override { return exited_; }

  void abandon() override {
    abandoned_ = true;
    on_exit_ = nullptr;
    if (!exited_) ::kill(-static_cast<pid_t>(pid_), SIGKILL);
    pipes_.abandon();
  }

  void start_reading(line_handler on_line) override {
    pipes_.start_reading(std::move(on_line), shared_from_this());
  }

  void write_line(std::string line, write_handler on_done) override {
    pipes_.write_line(std::move(line), std::move(on_done), shared_from_this());
  }

  void close_stdin() override { pipes_.close_stdin(); }

  void wait(exit_handler on_exit) override {
    on_exit_ = std::move(on_exit);
    proc_.async_wait([self = shared_from_this()](error_code ec, int) noexcept {
      exit_status st{};
      if (!ec) {
        self->exited_ = true;
        st = from_native(self->proc_.native_exit_code());
        self->proc_.detach();  // reaped: the pid may be reused, never signal it through bp again
      }
      if (self->on_exit_ && !self->abandoned_) std::exchange(self->on_exit_, nullptr)(ec, st);
    });
  }

  result<std::uint64_t> rss_bytes() const override { return tree_rss_bytes(pid_); }

  status signal_group(group_signal sig) override {
    const int signo = sig == group_signal::kill ? SIGKILL : SIGTERM;
    if (::kill(-static_cast<pid_t>(pid_), signo) != 0 && errno != ESRCH) {
      return errno_error("signal process group " + std::to_string(pid_), errno);
    }
    return {};
  }

 private:
  child proc_;
  pipe_pump<asio::readable_pipe, asio::writable_pipe> pipes_;
  std::int64_t pid_;
  bool exited_ = false;
  bool abandoned_ = false;
  exit_handler on_exit_;
};

result<std::unique_ptr<process>> spawn(asio::io_context& io, const spawn_options& options) {
  if (options.argv.empty()) return make_error("spawn: empty argv");
  const std::string& name = options.argv.front();
  auto program = resolve_program(name);
  if (!program) return program.error();
  if (!options.working_dir.empty()) {
    std::error_code fec;
    if (!std::filesystem::is_directory(options.working_dir, fec)) {
      return make_error("spawn " + name + ": working folder " + options.working_dir.string() +
                        " is not a folder");
    }
  }

  static std::once_flag sigpipe_once;
  std::call_once(sigpipe_once, [] { ::signal(SIGPIPE, SIG_IGN); });

  int out_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) return errno_error("spawn " + name + ": pipe", errno);
  fd_guard out_read(out_fds[0]), out_write(out_fds[1]);
  int in_fds[2];
  if (::pipe2(in_fds, O_CLOEXEC) != 0) return errno_error("spawn " + name + ": pipe", errno);
  fd_guard in_read(in_fds[0]), in_write(in_fds[1]);
  const std::string log = options.stderr_log.empty() ? "/dev/null" : options.stderr_log.string();
  fd_guard err(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (err.get() < 0) return errno_error("spawn " + name + ": open stderr log " + log, errno);

  error_code ec;
  asio::readable_pipe out(io);
  out.assign(out_read.get(), ec);
  if (ec) return make_error("spawn " + name + ": " + ec.message());
  out_read.release();
  asio::writable_pipe in(io);
  in.assign(in_write.get(), ec);
  if (ec) return make_error("spawn " + name + ": " + ec.message());
  in_write.release();

  const auto env_strings = merged_environment(options.env);
  std::vector<const char*> envp;
  for (const auto& s : env_strings) envp.push_back(s.c_str());
  envp.push_back(nullptr);
  const std::string dir = options.working_dir.string();
  child_setup setup{envp.data(), dir.empty() ? nullptr : dir.c_str(), ::getpid()};
  const std::vector<std::string> args(options.argv.begin() + 1, options.argv.end());

  // If exec fails the child calls exit(), flushing copies of our unflushed stdio buffers.
  std::fflush(stdout);
  std::fflush(stderr);
  bp::posix::default_launcher launcher;
  auto proc = launcher(io.get_executor(), ec, bp::filesystem::path(*program), args,
                       bp::process_stdio{in_read.get(), out_write.get(), err.get()}, setup);
  if (ec) return make_error("spawn " + name + ": " + ec.message());
  // The child holds its own copies of its pipe ends; ours must go, or EOF never comes.
  in_read.reset();
  out_write.reset();
  err.reset();
  auto state = std::make_shared<posix_process>(std::move(proc), std::move(out), std::move(in));
  return std::make_unique<process>(std::move(state));
}

status become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return errno_error("become subreaper", errno);
  return {};
}

result<std::uint64_t> tree_rss_bytes(std::int64_t pid) {
  auto table = procfs::list_processes();
  if (!table) return table.error();
  auto total = procfs::rss_bytes_of(pid);
  if (!total) return with_context("memory of process " + std::to_string(pid), total.error());
  std::uint64_t sum = *total;
  for (const auto d : procfs::descendants_of(*table, pid)) {
    if (auto r = procfs::rss_bytes_of(d)) sum += *r;  // one that just exited holds nothing
  }
  return sum;
}

result<int> kill_descendants(std::int64_t pid) {
  return stop_then_kill([pid](const std::vector<procfs::proc_entry>& t) {
    // Zombies are already dead: signalling one does nothing, and counting it would report a
    // kill that never happened. Their children (if any) are still found through the tree.
    std::unordered_set<std::int64_t> zombies;
    for (const auto& e : t) {
      if (e.state == 'Z') zombies.insert(e.pid);
    }
    auto all = procfs::descendants_of(t, pid);
    std::erase_if(all, [&](std::int64_t p) { return zombies.count(p) > 0; });
    return all;
  });
}

result<int> kill_orphans() {
  const std::int64_t self = ::getpid();
  return stop_then_kill([self](const std::vector<procfs::proc_entry>& t) {
    std::vector<std::int64_t> out;
    for (const auto& e : t) {
      if (e.ppid != self || is_registered(e.pid) || e.state == 'Z') continue;
      out.push_back(e.pid);
      for (const auto d : procfs::descendants_of(t, e.pid)) out.push_back(d);
    }
    return out;
  });
}

result<int> kill_orphans_with_env(std::string_view name, std::string_view value) {
  const std::int64_t self = ::getpid();
  std::string wanted(name);
  wanted += '=';
  wanted += value;
  return stop_then_kill([self, &wanted](const std::vector<procfs::proc_entry>& t) {
    std::vector<std::int64_t> out;
    for (const auto& e : t) {
      if (e.ppid != self || is_registered(e.pid) || e.state == 'Z') continue;
      // NUL-separated "NAME=value" entries; unreadable (gone, or not ours): not a match.
      std::ifstream in("/proc/" + std::to_string(e.pid) + "/environ", std::ios::binary);
      bool match = false;
      for (std::string entry; std::getline(in, entry, '\0');) {
        if (entry == wanted) {
          match = true;
          break;
        }
      }
      if (!match) continue;
      out.push_back(e.pid);
      for (const auto d : procfs::descendants_of(t, e.pid)) out.push_back(d);
    }
    return out;
  });
}

result<int> reap_orphans() {
  auto table = procfs::list_processes();
  if (!table) return table.error();
  const std::int64_t self = ::getpid();
  int reaped = 0;
  for (const auto& e : *table) {
    if (e.ppid != self || e.state != 'Z' || is_registered(e.pid)) continue;
    int st = 0;
    if (::waitpid(static_cast<pid_t>(e.pid), &st, WNOHANG) > 0) ++reaped;
  }
  return reaped;
}

}  // namespace baton::os
