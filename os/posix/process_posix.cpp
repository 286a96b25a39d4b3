// POSIX process control on Boost.Process v2's default launcher (fork + exec), with a launcher
// initializer that puts the child in its job's cgroup and its own group and ties its life to the
// supervisor's. This is the only file that includes Boost.Process headers (each such file costs
// 10-15 s). Containment (os/process.h) lives here too: the chosen cgroup hierarchy, the job
// cgroups of exited workers waiting to be removed, the child_reaper.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "os/cgroup.h"
#include "os/pipe_pump.h"
#include "os/posix/cgroup_linux.h"
#include "os/posix/proc_stat.h"
#include "os/posix/process_internal.h"
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

// Held from before a fork until the new pid is registered, and by every reap, so a reap can
// never take the exit status of a worker that is not registered yet; and around every creation
// and removal of a job cgroup.
std::mutex spawn_mutex;

constexpr const char* marker_name = "BATON_WORKER_GROUP";

// The containment chosen by setup_containment. Under spawn_mutex.
struct containment_state {
  std::string name = cgroup::supervisor_dir_name("");  // "baton-<hash of the key>"
  cgroup::hierarchy cgroups;                           // usable(): cgroup mode
  containment_report report{"process-group", "process group only: containment not set up", 0};
  // Job cgroups of workers that are gone, killed but not yet empty: removed by a later sweep.
  std::vector<std::shared_ptr<cgroup::job_cgroup>> retired;
};
containment_state& containment_now() {
  static auto* s = new containment_state();  // never destroyed: workers may outlive statics
  return *s;
}

// Removes the retired job cgroups that have emptied since. Under spawn_mutex.
void sweep_retired() {
  auto& r = containment_now().retired;
  std::erase_if(r, [](const auto& cg) { return static_cast<bool>(cg->remove()); });
}

// Kills what is in a gone worker's cgroup and removes it, or keeps it for a later sweep.
void retire(std::shared_ptr<cgroup::job_cgroup> cg) {
  std::lock_guard lock(spawn_mutex);
  (void)cg->kill_all(std::chrono::milliseconds(100));
  if (!cg->remove()) containment_now().retired.push_back(std::move(cg));
  sweep_retired();
}

error errno_error(const std::string& what, int err) {
  return make_error(what + ": " + std::strerror(err));
}

using fd_guard = posix_detail::unique_fd;

// Runs in the forked child before exec: only async-signal-safe calls from here on.
struct child_setup {
  const char* const* envp;
  const char* working_dir;  // nullptr: inherit
  pid_t parent;
  const char* const* join_cgroups;  // cgroup.procs files, nullptr-terminated
  // The user the worker becomes (spawn_options::credentials); null: stay the supervisor's.
  const process_credentials* become = nullptr;
  const gid_t* groups = nullptr;  // become->groups as gid_t, prepared before the fork
  std::size_t group_count = 0;
  int keep_fd = -1;  // one more fd of ours the child keeps (a fork server's socket); -1: none

  error_code on_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&,
                      const char* const*) {
    launcher.env = envp;
    if (keep_fd >= 0) launcher.fd_whitelist.push_back(keep_fd);
    return {};
  }

  error_code on_exec_setup(bp::posix::default_launcher&, const bp::filesystem::path&,
                           const char* const*) {
    // Into the job's cgroup first, before the worker runs a single instruction of its own: what
    // it forks from here on is born inside (v2 and v1 both read "0" as "the writer").
    for (auto f = join_cgroups; f != nullptr && *f != nullptr; ++f) {
      const int fd = ::open(*f, O_WRONLY | O_CLOEXEC);
      if (fd < 0) return error_code(errno, boost::system::system_category());
      const bool ok = ::write(fd, "0", 1) == 1;
      const int err = errno;
      ::close(fd);
      if (!ok) return error_code(err, boost::system::system_category());
    }
    // Own group, so signal_group reaches the worker's children but never the supervisor.
    if (::setpgid(0, 0) != 0) return error_code(errno, boost::system::system_category());
    // The user's identity after the cgroup (joining needs root) and before the death signal,
    // which the kernel clears on every change of credentials.
    if (become != nullptr) {
      if (auto ec = drop_to_user(); ec) return ec;
    }
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
    // As the worker's user: a folder that user may not enter fails the spawn.
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
    if (keep_fd >= 0 && ::fcntl(keep_fd, F_SETFD, 0) != 0) {
      return error_code(errno, boost::system::system_category());
    }
    return {};
  }

  // Groups first, gid, then uid (after setuid the others are no longer ours to set); every id,
  // real, effective and saved, so nothing keeps root. Then proof: setuid(0) must fail. Any
  // failure fails the spawn before exec, so no worker ever runs with half of its identity.
  error_code drop_to_user() const {
    const auto fail = [](int err) { return error_code(err, boost::system::system_category()); };
    if (::setgroups(group_count, groups) != 0) return fail(errno);
    if (::setresgid(become->gid, become->gid, become->gid) != 0) return fail(errno);
    if (::setresuid(become->uid, become->uid, become->uid) != 0) return fail(errno);
    if (::getuid() != become->uid || ::geteuid() != become->uid || ::getgid() != become->gid ||
        ::getegid() != become->gid) {
      return fail(EPERM);
    }
    if (become->uid != 0 && ::setuid(0) == 0) return fail(EPERM);
    // No setuid binary, file capability or LSM transition gives the worker more than this.
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(errno);
    return {};
  }
};

// Whether `st` (a regular file) is one `who` may execute, by its mode bits: the part of
// execve's check a lookup done as root would otherwise skip (root may run any file with an x
// bit). Folders on the way are not checked; exec reports those.
bool executable_by(const struct stat& st, const process_credentials& who) {
  if (who.uid == st.st_uid) return (st.st_mode & S_IXUSR) != 0;
  const bool in_group = who.gid == st.st_gid || std::find(who.groups.begin(), who.groups.end(),
                                                          st.st_gid) != who.groups.end();
  return (st.st_mode & (in_group ? S_IXGRP : S_IXOTH)) != 0;
}

// execve does no PATH search; do it here, in the parent, with the PATH the child will have (as
// `env PATH=... name` does): the job's, or its submitter's, else the supervisor's. As a shell
// would: a relative entry (empty is ".") is the child's working folder's, and only a regular
// file its user may execute counts.
result<std::string> resolve_program(const spawn_options& options) {
  const std::string& name = options.argv.front();
  if (name.empty()) return make_error("spawn: argv[0] is empty");
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (const auto& [key, value] : options.env) {
    if (key == "PATH") path = value.c_str();
  }
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::error_code ec;
  const auto here =
      options.working_dir.empty() ? std::filesystem::current_path(ec) : options.working_dir;
  while (true) {
    const auto colon = dirs.find(':');
    std::filesystem::path dir(std::string(dirs.substr(0, colon)));
    if (dir.empty()) dir = ".";
    if (dir.is_relative()) dir = here / dir;
    const std::string candidate = (dir / name).lexically_normal().string();
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        (options.credentials ? executable_by(st, *options.credentials)
                             : ::access(candidate.c_str(), X_OK) == 0)) {
      return candidate;
    }
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

// /proc/PID/task/TID/children exists only with CONFIG_PROC_CHILDREN; probed once.
bool children_files_work() {
  static const bool works = [] {
    const std::string self = std::to_string(::getpid());
    return ::access(("/proc/" + self + "/task/" + self + "/children").c_str(), R_OK) == 0;
  }();
  return works;
}

// The children of `pid` from its threads' children files (each thread's own children: a
// re-parented orphan is listed under the thread that adopted it).
std::vector<std::int64_t> children_of(std::int64_t pid) {
  std::vector<std::int64_t> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(task.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(task + "/" + e->d_name + "/children");
    for (std::int64_t c = 0; in >> c;) out.push_back(c);
  }
  ::closedir(d);
  return out;
}

// Descendants of `root` (not itself), through the children files where they work.
result<std::vector<std::int64_t>> descendants(std::int64_t root) {
  if (!children_files_work()) {
    auto table = procfs::list_processes();
    if (!table) return table.error();
    return procfs::descendants_of(*table, root);
  }
  std::vector<std::int64_t> out;
  std::unordered_set<std::int64_t> seen{root};
  std::vector<std::int64_t> todo{root};
  while (!todo.empty()) {
    const auto p = todo.back();
    todo.pop_back();
    for (const auto c : children_of(p)) {
      if (!seen.insert(c).second) continue;
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

bool environ_has(std::int64_t pid, std::string_view wanted, bool prefix) {
  // NUL-separated "NAME=value" entries; unreadable (gone, or not ours): not a match.
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  for (std::string entry; std::getline(in, entry, '\0');) {
    if (prefix ? entry.rfind(wanted, 0) == 0 : entry == wanted) return true;
  }
  return false;
}

// The supervisor's children it did not spawn (orphans re-parented to it as subreaper) whose
// environment holds `wanted` exactly, with all their descendants.
result<std::vector<std::int64_t>> marked_orphans(std::string_view wanted) {
  const std::int64_t self = ::getpid();
  std::vector<std::int64_t> orphans;
  if (children_files_work()) {
    orphans = children_of(self);
  } else {
    auto table = procfs::list_processes();
    if (!table) return table.error();
    for (const auto& e : *table) {
      if (e.ppid == self && e.state != 'Z') orphans.push_back(e.pid);
    }
  }
  std::vector<std::int64_t> out;
  for (const auto o : orphans) {
    if (is_registered(o) || !environ_has(o, wanted, false)) continue;
    out.push_back(o);
    if (auto d = descendants(o)) out.insert(out.end(), d->begin(), d->end());
  }
  return out;
}

}  // namespace

class posix_process final : public process::impl,
                            public std::enable_shared_from_this<posix_process> {
 public:
  using child = bp::basic_process<asio::io_context::executor_type>;

  posix_process(child proc, asio::readable_pipe out, asio::writable_pipe in,
                std::optional<asio::readable_pipe> err, std::shared_ptr<cgroup::job_cgroup> cg,
                std::string marker, std::chrono::milliseconds read_pace)
      : proc_(std::move(proc)),
        pipes_(std::move(out), std::move(in), read_pace),
        pid_(proc_.id()),
        cg_(std::move(cg)),
        marker_(std::move(marker)) {
    if (err) err_.emplace(std::move(*err), read_pace);
    register_pid(pid_);
  }

  // From spawn, before it returns: the worker must never block on a full stderr pipe.
  void start_stderr(chunk_handler on_chunk) {
    if (err_) err_->start_reading(std::move(on_chunk), shared_from_this());
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
  bool contained() const override { return cg_ != nullptr; }

  void abandon() override {
    abandoned_ = true;
    on_exit_ = nullptr;
    if (!exited_) ::kill(-static_cast<pid_t>(pid_), SIGKILL);
    pipes_.abandon();
    if (err_) err_->abandon();
    // The job's cgroup outlives no worker: emptied now, removed now or at a later sweep.
    if (cg_) retire(std::move(cg_));
  }

  void start_reading(line_handler on_line) override {
    pipes_.start_reading(std::move(on_line), shared_from_this());
  }

  void write_line(std::string line, write_handler on_done) override {
    pipes_.write_line(std::move(line), std::move(on_done), shared_from_this());
  }

  void close_stdin() override { pipes_.close_stdin(); }
  void read_unpaced() override { pipes_.read_now(shared_from_this()); }

  void wait(exit_handler on_exit) override {
    on_exit_ = std::move(on_exit);
    proc_.async_wait([self = shared_from_this()](error_code ec, int) noexcept {
      exit_status st{};
      if (!ec) {
        self->exited_ = true;
        st = from_native(self->proc_.native_exit_code());
        self->proc_.detach();  // reaped: the pid may be reused, never signal it through bp again
      }
      // Its last lines and the end of its output are wanted now, not at the next tick.
      self->pipes_.read_now(self);
      if (self->err_) self->err_->read_now(self);
      if (self->on_exit_ && !self->abandoned_) std::exchange(self->on_exit_, nullptr)(ec, st);
    });
  }

  status signal_group(group_signal sig) override {
    const int signo = sig == group_signal::kill ? SIGKILL : SIGTERM;
    if (cg_) {
      if (sig == group_signal::terminate) return cg_->signal_all(SIGTERM);
      auto k = cg_->kill_all();
      if (!k) return with_context("kill cgroup " + cg_->name(), k.error());
      return {};
    }
    if (::kill(-static_cast<pid_t>(pid_), signo) != 0 && errno != ESRCH) {
      return errno_error("signal process group " + std::to_string(pid_), errno);
    }
    if (sig == group_signal::kill && !marker_.empty()) {
      // The fallback: what left the group is found through the tree while the worker lives
      // (once it is reaped its pid may be someone else's), and by its mark once re-parented.
      if (!exited_) (void)kill_descendants(pid_);
      (void)kill_orphans_with_env(marker_name, marker_);
    }
    return {};
  }

  result<std::uint64_t> rss_bytes() const override {
    if (cg_) return cg_->memory_bytes();
    auto tree = tree_rss_bytes(pid_);
    if (!tree || marker_.empty()) return tree;
    // The fallback also counts the escapees re-parented to us that still carry the job's mark.
    auto marked = marked_orphans(std::string(marker_name) + "=" + marker_);
    if (!marked) return *tree;
    std::uint64_t sum = *tree;
    for (const auto p : *marked) {
      if (auto r = procfs::rss_bytes_of(p)) sum += *r;
    }
    return sum;
  }

 private:
  child proc_;
  pipe_pump<asio::readable_pipe, asio::writable_pipe> pipes_;
  std::optional<chunk_reader<asio::readable_pipe>> err_;  // with spawn_options::on_stderr
  std::int64_t pid_;
  std::shared_ptr<cgroup::job_cgroup> cg_;  // null: process group (and mark) only
  std::string marker_;                      // BATON_WORKER_GROUP's value; empty: no group
  bool exited_ = false;
  bool abandoned_ = false;
  exit_handler on_exit_;
};

namespace posix_detail {

void unique_fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

result<std::unique_ptr<worker_stdio>> make_worker_stdio(asio::io_context& io,
                                                        const spawn_options& options,
                                                        const std::string& who) {
  auto s = std::make_unique<worker_stdio>(io);
  int out_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) return errno_error(who + ": pipe", errno);
  fd_guard out_read(out_fds[0]);
  s->child_out.reset(out_fds[1]);
  int in_fds[2];
  if (::pipe2(in_fds, O_CLOEXEC) != 0) return errno_error(who + ": pipe", errno);
  s->child_in.reset(in_fds[0]);
  fd_guard in_write(in_fds[1]);
  error_code ec;
  if (options.on_stderr) {
    int err_fds[2];
    if (::pipe2(err_fds, O_CLOEXEC) != 0) return errno_error(who + ": pipe", errno);
    fd_guard err_read(err_fds[0]);
    s->child_err.reset(err_fds[1]);
    s->err.emplace(io);
    s->err->assign(err_read.get(), ec);
    if (ec) return make_error(who + ": " + ec.message());
    err_read.release();
  } else {
    const std::string log = options.stderr_log.empty() ? "/dev/null" : options.stderr_log.string();
    // O_NOFOLLOW: the log may sit in a folder the worker's user owns, who could plant a link.
    s->child_err.reset(
        ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (s->child_err.get() < 0) return errno_error(who + ": open stderr log " + log, errno);
  }
  s->out.assign(out_read.get(), ec);
  if (ec) return make_error(who + ": " + ec.message());
  out_read.release();
  s->in.assign(in_write.get(), ec);
  if (ec) return make_error(who + ": " + ec.message());
  in_write.release();
  return s;
}

}  // namespace posix_detail

namespace {

std::string group_marker(const containment_state& cs, const std::string& group) {
  return cs.name + "/" + cgroup::job_dir_name(group);
}

std::vector<std::pair<std::string, std::string>> env_with_marker(const spawn_options& options,
                                                                 const std::string& marker) {
  auto env = options.env;
  if (!marker.empty()) env.emplace_back(marker_name, marker);
  return env;
}

result<std::unique_ptr<process>> spawn_impl(asio::io_context& io, const spawn_options& options,
                                            int keep_fd) {
  if (options.argv.empty()) return make_error("spawn: empty argv");
  const std::string& name = options.argv.front();
  auto program = resolve_program(options);
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

  auto stdio = posix_detail::make_worker_stdio(io, options, "spawn " + name);
  if (!stdio) return stdio.error();

  // The whole launch under spawn_mutex: no reap may run between the fork and the registration.
  std::unique_lock lock(spawn_mutex);
  auto& cs = containment_now();
  sweep_retired();
  std::string marker;
  std::shared_ptr<cgroup::job_cgroup> cg;
  std::vector<std::string> join_files;
  if (!options.group.empty()) {
    marker = group_marker(cs, options.group);
    if (cs.cgroups.usable()) {
      auto opened = cgroup::open_job(cs.cgroups, options.group);
      if (!opened) return with_context("spawn " + name, opened.error());
      cg = std::move(*opened);
      join_files = cg->procs_files();
    }
  }
  std::vector<const char*> join;
  for (const auto& f : join_files) join.push_back(f.c_str());
  join.push_back(nullptr);
  const auto env_strings = merged_environment(env_with_marker(options, marker));
  std::vector<const char*> envp;
  for (const auto& s : env_strings) envp.push_back(s.c_str());
  envp.push_back(nullptr);
  const std::string dir = options.working_dir.string();
  child_setup setup{envp.data(), dir.empty() ? nullptr : dir.c_str(), ::getpid(), join.data()};
  setup.keep_fd = keep_fd;
  std::vector<gid_t> groups;
  if (options.credentials) {
    groups.assign(options.credentials->groups.begin(), options.credentials->groups.end());
    setup.become = &*options.credentials;
    setup.groups = groups.empty() ? nullptr : groups.data();
    setup.group_count = groups.size();
  }
  const std::vector<std::string> args(options.argv.begin() + 1, options.argv.end());

  // If exec fails the child calls exit(), flushing copies of our unflushed stdio buffers.
  std::fflush(stdout);
  std::fflush(stderr);
  error_code ec;
  bp::posix::default_launcher launcher;
  auto& s = **stdio;
  auto proc =
      launcher(io.get_executor(), ec, bp::filesystem::path(*program), args,
               bp::process_stdio{s.child_in.get(), s.child_out.get(), s.child_err.get()}, setup);
  if (ec) {
    if (cg) (void)cg->remove();
    std::string as;
    if (options.credentials) {
      as = " (or becoming uid " + std::to_string(options.credentials->uid) + " gid " +
           std::to_string(options.credentials->gid) + ")";
    }
    return make_error("spawn " + name + ": " + ec.message() +
                      (cg ? " (or joining cgroup " + cg->name() + ")" : "") + as);
  }
  // The child holds its own copies of its pipe ends; ours must go, or EOF never comes.
  s.close_child_ends();
  auto state = std::make_shared<posix_process>(std::move(proc), std::move(s.out), std::move(s.in),
                                               std::move(s.err), std::move(cg), std::move(marker),
                                               options.read_pace);
  state->start_stderr(options.on_stderr);
  return std::make_unique<process>(std::move(state));
}

}  // namespace

result<std::unique_ptr<process>> spawn(asio::io_context& io, const spawn_options& options) {
  return spawn_impl(io, options, -1);
}

namespace posix_detail {

std::vector<std::string> worker_environment(const spawn_options& options) {
  std::string marker;
  if (!options.group.empty()) {
    std::lock_guard lock(spawn_mutex);
    marker = group_marker(containment_now(), options.group);
  }
  return merged_environment(env_with_marker(options, marker));
}

result<std::unique_ptr<process>> spawn_keeping_fd(asio::io_context& io,
                                                  const spawn_options& options, int keep_fd) {
  return spawn_impl(io, options, keep_fd);
}

result<std::unique_ptr<process>> adopt(asio::io_context& io, std::int64_t pid,
                                       std::unique_ptr<worker_stdio> stdio,
                                       const spawn_options& options,
                                       const std::string& from_group) {
  const std::string who = "adopt worker " + std::to_string(pid);
  if (pid <= 1) return make_error(who + ": not a worker's pid");
  std::unique_lock lock(spawn_mutex);
  auto& cs = containment_now();
  if (!cs.cgroups.usable() || options.group.empty()) {
    return make_error(who + ": needs cgroup containment and a job group");
  }
  // A worker of ours already (the fork server itself, say): never a second owner of one pid.
  if (is_registered(pid)) return make_error(who + ": it is already one of the supervisor's");
  // Registered first, so no reap takes its status while it is checked. Held by a pidfd from
  // here on: while it is our unreaped child the pid cannot be someone else's.
  register_pid(pid);
  auto fail = [&](std::string why) -> error {
    unregister_pid(pid);
    return make_error(who + ": " + why);
  };
  // Only a member of the fork server's cgroup is taken: what is in there is this job's, so a
  // lying server can name no other process to be moved (and later killed) with the job.
  const auto from = cgroup::job_at(cs.cgroups, from_group);
  auto members = from->members();
  if (!members) return fail(members.error().message);
  if (std::find(members->begin(), members->end(), pid) == members->end()) {
    return fail("it is not in cgroup " + from->name() + ", where its fork server runs");
  }
  auto opened = cgroup::open_job(cs.cgroups, options.group);
  if (!opened) return fail(opened.error().message);
  auto cg = std::move(*opened);
  if (auto s = cg->add_process(pid); !s) {
    return fail("joining cgroup " + cg->name() + ": " + s.error().message);
  }
  // Contained now, but ours to wait for only once the server's middle process has exited and
  // the kernel re-parented it to us (a subreaper). The server replies before that exit, which
  // then overlaps the cgroup moves above; it takes milliseconds.
  const auto fail_killed = [&](std::string why) -> error {
    ::kill(static_cast<pid_t>(pid), SIGKILL);  // this job's process, in this job's cgroup
    return fail(std::move(why));
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (true) {
    auto stat = procfs::read_kernel_file("/proc/" + std::to_string(pid) + "/stat");
    auto entry = stat ? procfs::parse_stat(*stat) : result<procfs::proc_entry>(stat.error());
    if (!entry) return fail_killed("cannot read its /proc entry: " + entry.error().message);
    if (entry->ppid == ::getpid()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return fail_killed("it is not a child of the supervisor (its parent is " +
                         std::to_string(entry->ppid) + "; is the supervisor a subreaper?)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) return fail(errno_error("pidfd_open", errno).message);
  posix_process::child proc(io.get_executor(), static_cast<bp::pid_type>(pid), pidfd);
  stdio->close_child_ends();
  unregister_pid(pid);  // posix_process registers it again, for its whole life
  auto state = std::make_shared<posix_process>(
      std::move(proc), std::move(stdio->out), std::move(stdio->in), std::move(stdio->err),
      std::move(cg), group_marker(cs, options.group), options.read_pace);
  state->start_stderr(options.on_stderr);
  return std::make_unique<process>(std::move(state));
}

}  // namespace posix_detail

status become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return errno_error("become subreaper", errno);
  return {};
}

result<std::uint64_t> tree_rss_bytes(std::int64_t pid) {
  auto total = procfs::rss_bytes_of(pid);
  if (!total) return with_context("memory of process " + std::to_string(pid), total.error());
  auto all = descendants(pid);
  if (!all) return all.error();
  std::uint64_t sum = *total;
  for (const auto d : *all) {
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
  std::lock_guard lock(spawn_mutex);
  sweep_retired();
  int reaped = 0;
  // Fast path: peek at the next zombie child without reaping it (WNOWAIT); reap it only when
  // no `process` owns it.
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return reaped;  // ECHILD
    if (info.si_pid == 0) return reaped;                                             // no zombie
    if (is_registered(info.si_pid)) break;  // a worker's: its exit status is Boost's to take
    int st = 0;
    if (::waitpid(info.si_pid, &st, WNOHANG) > 0) ++reaped;
  }
  // A registered zombie comes first in the kernel's list and hides the rest: look at each child.
  const std::int64_t self = ::getpid();
  std::vector<std::int64_t> kids;
  if (children_files_work()) {
    kids = children_of(self);
  } else {
    auto table = procfs::list_processes();
    if (!table) return table.error();
    for (const auto& e : *table) {
      if (e.ppid == self && e.state == 'Z') kids.push_back(e.pid);
    }
  }
  for (const auto pid : kids) {
    if (is_registered(pid)) continue;
    int st = 0;
    if (::waitpid(static_cast<pid_t>(pid), &st, WNOHANG) > 0) ++reaped;
  }
  return reaped;
}

struct child_reaper::impl : std::enable_shared_from_this<child_reaper::impl> {
  explicit impl(asio::io_context& io) : signals(io, SIGCHLD) {}
  void arm() {
    signals.async_wait([weak = weak_from_this()](const error_code& ec, int) noexcept {
      auto self = weak.lock();
      if (ec || !self) return;
      if (auto n = reap_orphans()) self->reaped += *n;
      self->arm();
    });
  }
  asio::signal_set signals;
  int reaped = 0;
};

child_reaper::child_reaper(asio::io_context& io) : impl_(std::make_shared<impl>(io)) {
  impl_->arm();
  // Orphans that died before the handler was in place.
  if (auto n = reap_orphans()) impl_->reaped += *n;
}
child_reaper::~child_reaper() {
  error_code ignored;
  impl_->signals.cancel(ignored);
}
int child_reaper::reaped() const { return impl_->reaped; }

containment_report setup_containment(const containment_options& options) {
  containment_report report;
  std::string name;
  {
    std::lock_guard lock(spawn_mutex);
    auto& cs = containment_now();
    cs.name = cgroup::supervisor_dir_name(options.key);
    name = cs.name;
    std::string why_not = "forced (BATON_CONTAINMENT=process-group)";
    if (!options.force_process_group) {
      why_not.clear();
      cs.cgroups = cgroup::set_up(options.key, why_not);
    } else {
      cs.cgroups = {};
    }
    if (cs.cgroups.usable()) {
      report.mode = "cgroup";
      report.detail = cs.cgroups.describe();
      auto killed = cgroup::kill_leftovers(cs.cgroups);
      if (killed) report.leftovers_killed = *killed;
      if (!killed) report.detail += " (leftovers: " + killed.error().message + ")";
    } else {
      report.mode = "process-group";
      report.detail = "process group + subreaper, no cgroup: " + why_not;
    }
  }
  // Whatever a previous life left outside cgroups (this mode then, or workers that were never
  // in one) is found by its mark anywhere in /proc: a one-time scan at start-up.
  const std::string wanted = std::string(marker_name) + "=" + name + "/";
  auto left = stop_then_kill([&wanted](const std::vector<procfs::proc_entry>& t) {
    const std::int64_t self = ::getpid();
    std::vector<std::int64_t> out;
    for (const auto& e : t) {
      if (e.pid == self || e.state == 'Z' || is_registered(e.pid)) continue;
      if (environ_has(e.pid, wanted, true)) out.push_back(e.pid);
    }
    return out;
  });
  if (left) report.leftovers_killed += *left;
  std::lock_guard lock(spawn_mutex);
  containment_now().report = report;
  return report;
}

void end_containment() {
  std::lock_guard lock(spawn_mutex);
  auto& cs = containment_now();
  sweep_retired();
  if (cs.cgroups.usable()) (void)cgroup::remove_empty(cs.cgroups);
}

containment_report current_containment() {
  std::lock_guard lock(spawn_mutex);
  return containment_now().report;
}

}  // namespace baton::os
