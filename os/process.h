// Child process control for the supervisor: spawn a worker (argv, never a shell) in its own
// process group, read its stdout as lines, write lines to its stdin, wait for its exit, signal
// the whole group, and measure the memory of the worker and everything it started.
// The supervisor owns each `process`; destroying one kills the worker's group if it still runs.
// Containment: a worker spawned with a `group` (a job) is held with everything it starts, so
// nothing can leave by setsid or a double fork. How is the host's: on Linux the job's own cgroup
// below the supervisor's (os/posix/cgroup_linux.h), set up once by setup_containment(); where no
// cgroup is writable, its process group plus the supervisor as subreaper (today's tracking); on
// Windows a Job Object per worker without breakaway.
// Implementations: os/posix/process_posix.cpp (Linux: /proc, prctl, cgroups) and
// os/windows/process_windows.cpp (a Job Object per worker stands in for the process group and
// the death signal; Windows has no SIGTERM, so a graceful stop is the protocol's `stop` line).
// Both read stdout and write stdin through one os/pipe_pump.h, and stderr (when the caller asks
// for it, spawn_options::on_stderr) through its chunk_reader.
// No OS headers here.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "os/exit_status.h"

namespace baton::os {

// Longest stdout line delivered whole (the protocol's max_message_bytes). A longer line is cut.
inline constexpr std::size_t max_line_bytes = 1 << 20;

// Called with each chunk of stderr as it was read (at most 64 KiB, cut anywhere, even inside a
// line or a UTF-8 character), ec empty; then once more with ec set (eof when every holder of the
// pipe's write end closed it, or a read error) and no data. Never called after the process object
// is destroyed: the end of a worker never waits for a descendant that keeps stderr open.
// Must not throw.
using chunk_handler =
    std::function<void(const boost::system::error_code& ec, std::string_view data)>;

// Who a worker runs as when it is not the supervisor's own user (system mode, jobs_run_as =
// "submitter": the job's submitter, from the control socket's peer credentials). The supervisor
// must be root to give them.
struct process_credentials {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::vector<std::uint32_t> groups;  // supplementary groups, exactly these (empty: none)
};

struct spawn_options {
  // argv[0] is the program: a path, or a name looked up in the PATH the process will have
  // (a PATH in `env`, else the supervisor's).
  std::vector<std::string> argv;
  // Added to (or replacing same-named entries of) the supervisor's own environment.
  std::vector<std::pair<std::string, std::string>> env;
  std::filesystem::path working_dir;  // empty: the supervisor's
  std::filesystem::path stderr_log;   // appended to; empty: /dev/null. Unused with on_stderr.
  // When set, stderr is a pipe read on the io thread from the spawn on, its bytes handed here in
  // chunks (see chunk_handler): the supervisor decides what reaches the disk. Empty: stderr_log.
  chunk_handler on_stderr;
  // Windows only (ignored on POSIX): a per-process commit limit on the worker's Job Object
  // (JOB_OBJECT_LIMIT_PROCESS_MEMORY), a backstop under the supervisor's own RSS sampling.
  std::optional<std::uint64_t> memory_backstop_bytes;
  // The containment group (a job id) the worker and everything it starts are held in; workers of
  // one group share it, one after another. Empty: the worker's process group only. With cgroup
  // containment the child joins the group's cgroup before exec, so not even its first fork can
  // be outside; in every mode it also gets BATON_WORKER_GROUP=<supervisor>/<group> in its
  // environment, which the process-group fallback uses to find escapees re-parented to us.
  std::string group;
  // Paced reading of stdout and stderr (os/pipe_pump.h, "Paced reading"): a read that brought a
  // trickle waits for the next multiple of this on the steady clock, so many chatty workers
  // cost one wakeup a tick instead of one a line. 0: every line is handled as it comes.
  std::chrono::milliseconds read_pace{0};
  // Set: the child drops to these before exec, after joining its cgroup (which stays the
  // supervisor's, so the worker cannot raise its own limits): setgroups, setgid, setuid, then a
  // check that setuid(0) fails (no way back to root) and PR_SET_NO_NEW_PRIVS (no setuid binary
  // gives it more). Its working folder is entered as that user. Unset: the supervisor's user.
  // Windows: a spawn with credentials fails (not supported).
  std::optional<process_credentials> credentials;
};

// How workers are held together on this host (setup_containment).
struct containment_report {
  // "cgroup", "process-group" (the fallback: process group, subreaper, /proc) or "job-object".
  std::string mode = "process-group";
  // For people: which cgroups and controllers, or why the fallback ("cgroup v2
  // /sys/fs/cgroup/x/baton-..., memory from cgroup v1 ...").
  std::string detail;
  // Processes a previous supervisor of the same state dir left in its groups, killed at set-up.
  int leftovers_killed = 0;
};

struct containment_options {
  // Names the supervisor's groups (the state dir's absolute path): the same key finds the
  // groups of a previous supervisor's life, which are emptied before anything starts.
  std::string key;
  // Use the process-group fallback even where cgroups are writable (tests, and hosts where a
  // cgroup of our own is unwanted).
  bool force_process_group = false;
};

// Chooses the containment for every later spawn with a `group`, and kills what a previous
// supervisor with the same key left in its groups. Call once, before the first spawn; never
// fails (a host without writable cgroups gets the fallback, and the report says why).
containment_report setup_containment(const containment_options& options);
// The containment chosen by setup_containment (before it: the process-group fallback).
containment_report current_containment();
// At the supervisor's end, after its last worker: removes its job cgroups that are empty and its
// own, so a state dir that is no longer served leaves nothing in /sys/fs/cgroup. Best effort.
void end_containment();

// Collects the exit status of orphans (escapees re-parented to the subreaper supervisor) as soon
// as they die, on SIGCHLD, so none stays a zombie until the next spawn; never the status of a
// process started by spawn(), which belongs to its `process`. Also removes job cgroups that
// emptied late. Lives on the io_context's thread; Windows has nothing to reap.
class child_reaper {
 public:
  explicit child_reaper(boost::asio::io_context& io);
  ~child_reaper();
  child_reaper(const child_reaper&) = delete;
  child_reaper& operator=(const child_reaper&) = delete;
  int reaped() const;  // orphans reaped so far

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

// Called once per stdout line, without the newline:
//  - ec empty: a whole line;
//  - ec == boost::system::errc::message_size: a line longer than max_line_bytes, cut to its first
//    max_line_bytes; the rest of it is skipped and reading goes on;
//  - any other ec (asio::error::eof at end of output, operation_aborted when the process object
//    is destroyed, a read error): the last call, `line` empty.
// Handlers must not throw (they run inside Asio; a throw terminates the supervisor).
using line_handler =
    std::function<void(const boost::system::error_code& ec, std::string_view line)>;
using exit_handler = std::function<void(const boost::system::error_code& ec, exit_status status)>;
using write_handler = std::function<void(const boost::system::error_code& ec)>;

// SIGTERM, SIGKILL. On Windows both end the whole Job Object (TerminateJobObject): console
// programs ignore WM_CLOSE and Ctrl-C cannot be aimed at one child, so the graceful path is the
// protocol's `stop` line. The exit is then reported as signaled(15) or signaled(9).
enum class group_signal { terminate, kill };

class process {
 public:
  // What each OS implements (os/posix/process_posix.cpp, os/windows/process_windows.cpp), with
  // the meaning of the methods below. Shared, not owned: pending Asio handlers keep it alive after
  // the process object is gone, and abandon() tells it so.
  class impl {
   public:
    virtual ~impl() = default;
    virtual std::int64_t pid() const = 0;
    virtual void start_reading(line_handler on_line) = 0;
    virtual void write_line(std::string line, write_handler on_done) = 0;
    virtual void close_stdin() = 0;
    virtual void read_unpaced() = 0;
    virtual void wait(exit_handler on_exit) = 0;
    virtual bool exited() const = 0;
    virtual status signal_group(group_signal sig) = 0;
    virtual result<std::uint64_t> rss_bytes() const = 0;
    virtual bool contained() const = 0;
    // The process object is being destroyed: kill the group unless the worker exited.
    virtual void abandon() = 0;
  };
  explicit process(std::shared_ptr<impl> p);
  process(const process&) = delete;
  process& operator=(const process&) = delete;
  // Kills the process group (SIGKILL) unless the worker has been seen to exit, and aborts
  // pending reads and writes (their handlers get operation_aborted).
  ~process();

  std::int64_t pid() const;

  // Starts reading stdout; call once. See line_handler for the calls it makes.
  void async_read_lines(line_handler on_line);
  // Writes `line` plus '\n' to the worker's stdin. Writes are queued and go out in order.
  void async_write_line(std::string line, write_handler on_done);
  // Closes the worker's stdin (it reads end of file).
  void close_stdin();
  // Ends the pacing of stdout (spawn_options::read_pace) for good: its lines are read as they
  // come, for a worker whose next lines are wanted at once.
  void read_unpaced();
  // Calls `on_exit` once, when the worker has exited and been reaped; call once.
  void async_wait(exit_handler on_exit);
  bool exited() const;

  // Sends the signal to the worker's whole process group (the worker and every descendant that
  // did not leave the group). Sending to a group that is already gone is not an error.
  // With a containment group: to everything in the job's cgroup (kill: cgroup.kill, until it is
  // empty), or in the fallback also to the worker's descendants and its marked escapees.
  status signal_group(group_signal sig);
  // Current memory of the worker and all its descendants, in bytes: resident memory of the tree;
  // in a cgroup, the cgroup's anonymous plus kernel memory (escapees included, page cache not).
  result<std::uint64_t> rss_bytes() const;
  // Whether a cgroup or Job Object holds the worker and all it starts (nothing can escape), so
  // the supervisor needs no /proc walks to find what it left.
  bool contained() const;

 private:
  std::shared_ptr<impl> impl_;
};

// Starts a worker. The child gets its own process group, dies with SIGKILL when the spawning
// thread dies (PR_SET_PDEATHSIG, so spawn from a thread that lives as long as the supervisor),
// and exits at once if the supervisor died before it could arm that. stdout and stdin are pipes
// owned by the returned process; stderr goes to `on_stderr` if set (its reading starts before
// spawn returns), else to `stderr_log`. Ignores SIGPIPE in the supervisor (a write to a dead
// worker's stdin must be an error value, not a signal).
// Windows: the worker starts suspended and runs only inside its own Job Object
// (KILL_ON_JOB_CLOSE), which plays the group and the death signal; become_subreaper,
// kill_orphans and reap_orphans have nothing to do there (no re-parenting, no zombies).
result<std::unique_ptr<process>> spawn(boost::asio::io_context& io, const spawn_options& options);

// Makes the supervisor the reaper of orphaned descendants (PR_SET_CHILD_SUBREAPER): a worker's
// child that double-forks or calls setsid() is re-parented to us instead of init, so
// kill_orphans() can still reach it. Call once at start-up.
status become_subreaper();

// Resident memory of `pid` and all its descendants, in bytes (current, not peak). Follows
// /proc/PID/task/TID/children where the kernel has them (CONFIG_PROC_CHILDREN), a few files per
// process of the tree; else scans every process in /proc.
result<std::uint64_t> tree_rss_bytes(std::int64_t pid);

// SIGKILLs every descendant of `pid` (not `pid` itself), repeating until no new one appears, so
// processes that escaped the group (setsid) die too. Returns how many were signalled.
result<int> kill_descendants(std::int64_t pid);

// SIGKILLs the supervisor's direct children that it did not spawn (orphans re-parented to it as
// subreaper) and their descendants. Returns how many were signalled.
result<int> kill_orphans();

// SIGKILLs the orphans re-parented to the supervisor (as kill_orphans) whose environment holds
// exactly `name=value`, and their descendants: what one worker left behind after escaping its
// tree with a double fork, found by the BATON_* variables it inherited, while other jobs'
// orphans are left alone. One that rewrote its environment is missed; kill_orphans() at
// shutdown stays the backstop. Returns how many were signalled.
result<int> kill_orphans_with_env(std::string_view name, std::string_view value);

// Reaps exited orphans (zombie children the supervisor did not spawn). Never reaps a process
// started by spawn(): its exit status belongs to its `process`. Returns how many were reaped.
// child_reaper calls it on every SIGCHLD.
result<int> reap_orphans();

}  // namespace baton::os
