// Linux control groups as text: the pure half of cgroup containment (os/posix/cgroup_linux.h is
// the half that touches /sys/fs/cgroup). A supervisor holds each job's workers in a cgroup of
// their own, below a per-state-dir cgroup under the supervisor's own, so nothing a worker starts
// (setsid, double fork) can leave it, and its memory is the cgroup's. This file parses what the
// kernel writes (/proc/self/cgroup, /proc/self/mountinfo, memory.stat, cgroup.procs) and derives
// the names, so a restarted supervisor finds the cgroups of its previous life. No OS calls here:
// it compiles everywhere and is tested on fixed text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::os::cgroup {

// The value of `key` in a memory.stat text ("anon 1234\nfile 5678\n..."); nullopt when absent.
std::optional<std::uint64_t> stat_value(std::string_view memory_stat, std::string_view key);

// A job's memory on cgroup v2: anonymous memory plus kernel memory (page tables, stacks, slab,
// sockets), not page cache, which the kernel reclaims before it would kill anyone and which a
// worker reading its data set would otherwise be charged for. "kernel" exists from Linux 5.18;
// before it, its parts are summed.
result<std::uint64_t> v2_memory_bytes(std::string_view memory_stat);

// The same on a cgroup v1 memory controller: total_rss (anonymous and swap cache, this cgroup and
// below, as "anon" on v2) plus memory.kmem.usage_in_bytes (kernel memory, as "kernel" on v2;
// nullopt where the kernel has no kmem accounting). v1's "rss" without "total_" would miss a
// child cgroup, and memory.usage_in_bytes would count page cache.
result<std::uint64_t> v1_memory_bytes(std::string_view memory_stat,
                                      std::optional<std::uint64_t> kmem_usage);

// Where this process sits, from /proc/self/cgroup: the v2 path ("0::/a/b") and the v1 memory
// controller's ("4:memory:/a/b"); each nullopt when that hierarchy is not there.
struct membership {
  std::optional<std::string> v2;
  std::optional<std::string> v1_memory;
};
membership parse_proc_cgroup(std::string_view text);

// A cgroup file system mount from /proc/self/mountinfo: where it is mounted, and which cgroup of
// the hierarchy appears there ("/" unless a container mounted only part of it).
struct mount {
  std::string point;
  std::string root = "/";
};
// The cgroup2 mount and the cgroup v1 mount that carries the memory controller; each nullopt
// when not mounted. The first of each wins.
struct mounts {
  std::optional<mount> v2;
  std::optional<mount> v1_memory;
};
mounts parse_mountinfo(std::string_view text);

// The pids listed in a cgroup.procs text, one a line.
std::vector<std::int64_t> parse_pids(std::string_view text);

// Whether a cgroup.events text says "populated 1" (a process lives in it or below).
bool populated(std::string_view cgroup_events);

// "baton-<16 hex>": the cgroup below the supervisor's own that holds the job cgroups of one
// state dir (FNV-1a of its path), the same for every supervisor of that state dir, so the next
// one finds what the previous one left; two state dirs never share one.
std::string supervisor_dir_name(std::string_view state_key);

// "job-<id>": a job's cgroup. Characters other than [A-Za-z0-9._-] become '_', and then (or when
// the id is longer than 64) a hash of the id is appended, so different ids never collide.
std::string job_dir_name(std::string_view job_id);

// Where cgroup `path` (as /proc/self/cgroup names it) is in the file system: "/sys/fs/cgroup" and
// "/a/b" give "/sys/fs/cgroup/a/b"; a mount whose root is "/a" gives "/sys/fs/cgroup/b". nullopt
// when the path is outside what the mount shows.
std::optional<std::string> locate(const mount& m, std::string_view path);

}  // namespace baton::os::cgroup
