// Linux cgroups on disk: the half of cgroup containment that reads and writes /sys/fs/cgroup (the
// pure half, names and parsers, is os/cgroup.h). A `hierarchy` is where one supervisor keeps its
// job cgroups: <its own v2 cgroup>/baton-<hash of the state dir>, and on hybrid hosts, where the
// memory controller is still v1, the same name below its v1 memory cgroup. A `job_cgroup` is one
// job's: every worker of the job is written into it before exec (os/posix/process_posix.cpp), so
// all it starts stays there; its memory and its kill are the cgroup's.
// Process tracking and kill go through v2 when it is writable (cgroup.procs, cgroup.kill,
// cgroup.events), else through the v1 memory cgroup (cgroup.procs, a kill loop); memory comes from
// v2's memory.stat when v2 has the memory controller, else from v1's.
// Used by os/posix/process_posix.cpp only. Linux-specific; the caller serializes calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/posix/proc_stat.h"

namespace baton::os::cgroup {

struct hierarchy {
  std::string name;        // "baton-<hash>"
  std::string v2_base;     // holds the job cgroups on v2; empty: v2 not used
  std::string v1_base;     // holds them on the v1 memory controller; empty: not used
  bool v2_memory = false;  // the v2 job cgroups have memory.stat
  bool usable() const { return !v2_base.empty() || !v1_base.empty(); }
  // "cgroup v2 /sys/fs/cgroup/x/baton-..., memory from cgroup v1 /sys/fs/cgroup/memory/...".
  std::string describe() const;
};

// Finds this process's cgroups and creates the supervisor's below them. Never fails: what cannot
// be used is left empty and `why_not` says why (for the start line), and an unusable hierarchy
// means the process-group fallback. May move this process into a leaf cgroup of its own (v2 lets
// a cgroup hand a controller to its children only when no process sits in it, which is how
// systemd's Delegate=yes expects a service to arrange itself).
hierarchy set_up(const std::string& state_key, std::string& why_not);

class job_cgroup {
 public:
  job_cgroup(std::string name, std::string v2_dir, std::string v1_dir, bool v2_memory);

  const std::string& name() const { return name_; }
  // The cgroup.procs files a new worker writes "0" into, before exec.
  std::vector<std::string> procs_files() const;
  // Anonymous plus kernel memory of everything in the cgroup (cgroup.h says why); without a
  // memory controller, the sum of the members' resident memory.
  result<std::uint64_t> memory_bytes() const;
  // The pids in the cgroup, from the hierarchy that tracks processes.
  result<std::vector<std::int64_t>> members() const;
  // Sends `signo` to every member once.
  status signal_all(int signo) const;
  // SIGKILLs everything in the cgroup (cgroup.kill on v2, and a loop over cgroup.procs until it
  // stays empty, which is all v1 has) and waits up to `wait` for it to empty. Returns how many
  // processes were seen and signalled.
  result<int> kill_all(std::chrono::milliseconds wait = std::chrono::milliseconds(200)) const;
  // Removes the cgroup's folders; an error while a process is still in it.
  status remove() const;
  // Moves process `pid` in (every hierarchy's cgroup.procs): an adopted worker, which someone
  // else forked.
  status add_process(std::int64_t pid) const;

 private:
  std::string tracking_dir() const { return v2_dir_.empty() ? v1_dir_ : v2_dir_; }
  std::string name_, v2_dir_, v1_dir_;
  bool v2_memory_;
  // Kept open: memory_bytes() runs at every RSS sample of every job (procfs::kernel_file).
  mutable std::unique_ptr<procfs::kernel_file> stat_, kmem_;
};

// The cgroup for job group `group` below `h`, as it is on disk (nothing created or killed).
std::shared_ptr<job_cgroup> job_at(const hierarchy& h, const std::string& group);

// The cgroup for job group `group` below `h`, created when missing. One that exists may hold a
// previous worker's leftovers: they are killed first.
result<std::shared_ptr<job_cgroup>> open_job(const hierarchy& h, const std::string& group);

// Every job cgroup below `h`: what a previous supervisor of the same state dir left. Kills every
// process in them and removes them. Returns how many processes were killed.
result<int> kill_leftovers(const hierarchy& h);

// Removes the empty job cgroups below `h`, then `h`'s own folders if they are empty by then.
// An error names what is still busy.
status remove_empty(const hierarchy& h);

}  // namespace baton::os::cgroup
