// The pure half of cgroup containment on fixed text: memory.stat (v2 and v1), /proc/self/cgroup,
// mountinfo, cgroup.procs and cgroup.events, and the names a restarted supervisor derives again.
#include "os/cgroup.h"

#include <catch2/catch.hpp>
#include <set>

namespace cg = baton::os::cgroup;

namespace {

std::uint64_t value(const baton::result<std::uint64_t>& r) {
  REQUIRE(r);
  return *r;
}

}  // namespace

TEST_CASE("v2 memory is anon plus kernel, never page cache", "[unit][cgroup]") {
  const char* stat =
      "anon 157286400\nfile 524288000\nkernel 3145728\nkernel_stack 65536\npagetables 1048576\n"
      "shmem 0\nfile_mapped 1000\n";
  CHECK(cg::stat_value(stat, "file") == 524288000u);
  CHECK(cg::stat_value(stat, "anon_thp") == std::nullopt);
  // "kernel" is already the sum of its parts: they must not be added twice.
  CHECK(value(cg::v2_memory_bytes(stat)) == 157286400u + 3145728u);
}

TEST_CASE("v2 memory before Linux 5.18 sums the kernel parts", "[unit][cgroup]") {
  const char* stat =
      "anon 1000\nfile 99999\nkernel_stack 10\npagetables 20\npercpu 30\nsock 40\nvmalloc 50\n"
      "slab 60\nslab_reclaimable 55\n";
  CHECK(value(cg::v2_memory_bytes(stat)) == 1000u + 10 + 20 + 30 + 40 + 50 + 60);
  CHECK_FALSE(cg::v2_memory_bytes("file 12\n"));
}

TEST_CASE("v1 memory is total_rss plus kmem, never cache", "[unit][cgroup]") {
  const char* stat =
      "cache 3293184\nrss 1769472\nrss_huge 0\nshmem 0\ntotal_cache 9293184\ntotal_rss 2769472\n";
  CHECK(value(cg::v1_memory_bytes(stat, 4096)) == 2769472u + 4096u);
  CHECK(value(cg::v1_memory_bytes(stat, std::nullopt)) == 2769472u);
  // "rss" without "total_" is this cgroup alone: not enough.
  CHECK_FALSE(cg::v1_memory_bytes("rss 5\n", 1));
}

TEST_CASE("a process cgroup file (/proc/self/cgroup) names the v2 path and the v1 memory path", "[unit][cgroup]") {
  const auto hybrid = cg::parse_proc_cgroup(
      "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/3b8c\n2:cpu,cpuacct:/\n0::/\n");
  CHECK(hybrid.v2 == "/");
  CHECK(hybrid.v1_memory == "/process_api/3b8c");
  const auto pure = cg::parse_proc_cgroup("0::/system.slice/baton.service\n");
  CHECK(pure.v2 == "/system.slice/baton.service");
  CHECK_FALSE(pure.v1_memory);
  const auto joined = cg::parse_proc_cgroup("3:cpu,memory:/a:b\n");
  CHECK(joined.v1_memory == "/a:b");  // a ':' in the path stays
  CHECK_FALSE(joined.v2);
}

TEST_CASE("mountinfo finds the cgroup2 mount and the v1 memory mount", "[unit][cgroup]") {
  const char* text =
      "22 21 0:19 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "23 22 0:20 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "24 22 0:21 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
      "25 22 0:22 /ct\\0401 /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const auto m = cg::parse_mountinfo(text);
  REQUIRE(m.v2);
  CHECK(m.v2->point == "/sys/fs/cgroup/unified");
  CHECK(m.v2->root == "/ct 1");  // \040 is a space
  REQUIRE(m.v1_memory);
  CHECK(m.v1_memory->point == "/sys/fs/cgroup/memory");
  CHECK(m.v1_memory->root == "/");
  CHECK_FALSE(cg::parse_mountinfo("23 22 0:20 / /x rw - cgroup cgroup rw,cpu\n").v1_memory);
}

TEST_CASE("a cgroup path is located below its mount", "[unit][cgroup]") {
  const cg::mount root{"/sys/fs/cgroup", "/"};
  CHECK(cg::locate(root, "/") == "/sys/fs/cgroup");
  CHECK(cg::locate(root, "/system.slice/baton.service") ==
        "/sys/fs/cgroup/system.slice/baton.service");
  const cg::mount part{"/sys/fs/cgroup/", "/ct"};
  CHECK(cg::locate(part, "/ct/job") == "/sys/fs/cgroup/job");
  CHECK(cg::locate(part, "/ct") == "/sys/fs/cgroup");
  CHECK(cg::locate(part, "/other") == std::nullopt);
  CHECK(cg::locate(part, "/ctx") == std::nullopt);
}

TEST_CASE("cgroup.procs and cgroup.events", "[unit][cgroup]") {
  CHECK(cg::parse_pids("12\n345\n\n") == std::vector<std::int64_t>{12, 345});
  CHECK(cg::parse_pids("").empty());
  CHECK(cg::populated("populated 1\nfrozen 0\n"));
  CHECK_FALSE(cg::populated("populated 0\nfrozen 0\n"));
  CHECK_FALSE(cg::populated(""));
}

TEST_CASE("names are stable per state dir and distinct across jobs", "[unit][cgroup]") {
  const auto a = cg::supervisor_dir_name("/var/lib/baton");
  CHECK(a == cg::supervisor_dir_name("/var/lib/baton"));  // the next daemon finds it again
  CHECK(a != cg::supervisor_dir_name("/var/lib/baton2"));
  CHECK(a.rfind("baton-", 0) == 0);
  CHECK(a.size() == 6 + 16);

  CHECK(cg::job_dir_name("mnist-12") == "job-mnist-12");
  std::set<std::string> names;
  for (const char* id : {"a/b", "a_b", "a b", "..", "", "x.y"}) names.insert(cg::job_dir_name(id));
  CHECK(names.size() == 6);
  for (const auto& n : names) {
    CHECK(n.find('/') == std::string::npos);
    CHECK(n.rfind("job-", 0) == 0);
  }
  CHECK(cg::job_dir_name(std::string(300, 'x')).size() < 100);
}
