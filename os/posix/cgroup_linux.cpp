#include "os/posix/cgroup_linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "os/cgroup.h"
#include "os/posix/proc_stat.h"

namespace baton::os::cgroup {

namespace {

// One write(2) of `text`: a cgroup file takes a whole value per write.
status write_text(const std::string& path, const std::string& text, int* err_out = nullptr) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  int err = 0;
  if (fd < 0) {
    err = errno;
  } else {
    if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) err = errno;
    ::close(fd);
  }
  if (err_out != nullptr) *err_out = err;
  if (err != 0) return make_error("write " + text + " to " + path + ": " + std::strerror(err));
  return {};
}

// mkdir that accepts an existing folder.
status make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return {};
  return make_error("create cgroup " + path + ": " + std::strerror(errno));
}

bool has_word(std::string_view list, std::string_view word) {
  while (!list.empty()) {
    while (!list.empty() && (list.front() == ' ' || list.front() == '\n')) list.remove_prefix(1);
    const auto end = list.find_first_of(" \n");
    if (list.substr(0, end) == word) return true;
    if (end == std::string_view::npos) break;
    list.remove_prefix(end);
  }
  return false;
}

// Child folders of a cgroup whose names start with "job-".
std::vector<std::string> job_dirs(const std::string& base) {
  std::vector<std::string> out;
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("job-", 0) == 0) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// Gives the v2 cgroup `dir` the memory controller for its children. v2's "no internal processes"
// rule refuses (EBUSY) while a process sits in `dir` itself, unless `dir` is the root.
status enable_memory(const std::string& dir) {
  auto enabled = procfs::read_kernel_file(dir + "/cgroup.subtree_control");
  if (enabled && has_word(*enabled, "memory")) return {};
  return write_text(dir + "/cgroup.subtree_control", "+memory");
}

}  // namespace

std::string hierarchy::describe() const {
  std::string out;
  if (!v2_base.empty()) {
    out = "cgroup v2 " + v2_base;
    if (v2_memory) {
      out += " (memory from memory.stat)";
    } else if (!v1_base.empty()) {
      out += ", memory from cgroup v1 " + v1_base;
    } else {
      out += ", no memory controller: memory is the sum of its processes' RSS";
    }
  } else if (!v1_base.empty()) {
    out = "cgroup v1 memory " + v1_base;
  }
  return out;
}

hierarchy set_up(const std::string& state_key, std::string& why_not) {
  hierarchy h;
  h.name = supervisor_dir_name(state_key);
  auto info = procfs::read_kernel_file("/proc/self/mountinfo");
  auto self = procfs::read_kernel_file("/proc/self/cgroup");
  if (!info || !self) {
    why_not = "cannot read /proc/self/mountinfo or /proc/self/cgroup";
    return h;
  }
  const auto m = parse_mountinfo(*info);
  const auto where = parse_proc_cgroup(*self);
  std::vector<std::string> reasons;

  if (m.v2 && where.v2) {
    if (const auto own = locate(*m.v2, *where.v2)) {
      const std::string base = *own + "/" + h.name;
      if (auto s = make_dir(base); !s) {
        reasons.push_back(s.error().message);
      } else if (::access((base + "/cgroup.procs").c_str(), W_OK) != 0) {
        reasons.push_back(base + "/cgroup.procs is not writable");
      } else {
        h.v2_base = base;
        auto controllers = procfs::read_kernel_file(*own + "/cgroup.controllers");
        if (controllers && has_word(*controllers, "memory")) {
          auto s = enable_memory(*own);
          if (!s) {
            // Delegate=yes: we are the only process in our cgroup, so step into a leaf of our
            // own and try again. With other processes beside us it stays refused.
            const std::string leaf = *own + "/" + h.name + ".supervisor";
            if (make_dir(leaf) && write_text(leaf + "/cgroup.procs", "0")) s = enable_memory(*own);
          }
          if (s) s = enable_memory(base);
          h.v2_memory = static_cast<bool>(s);
          if (!s)
            reasons.push_back("no v2 memory controller for job cgroups: " + s.error().message);
        }
      }
    }
  }
  if (!h.v2_memory && m.v1_memory && where.v1_memory) {
    if (const auto own = locate(*m.v1_memory, *where.v1_memory)) {
      const std::string base = *own + "/" + h.name;
      if (auto s = make_dir(base); !s) {
        reasons.push_back(s.error().message);
      } else if (::access((base + "/cgroup.procs").c_str(), W_OK) != 0) {
        reasons.push_back(base + "/cgroup.procs is not writable");
      } else {
        h.v1_base = base;
      }
    }
  }
  if (!m.v2 && !m.v1_memory) reasons.push_back("no cgroup file system mounted");
  for (const auto& r : reasons) why_not += (why_not.empty() ? "" : "; ") + r;
  return h;
}

job_cgroup::job_cgroup(std::string name, std::string v2_dir, std::string v1_dir, bool v2_memory)
    : name_(std::move(name)),
      v2_dir_(std::move(v2_dir)),
      v1_dir_(std::move(v1_dir)),
      v2_memory_(v2_memory) {}

std::vector<std::string> job_cgroup::procs_files() const {
  std::vector<std::string> out;
  if (!v2_dir_.empty()) out.push_back(v2_dir_ + "/cgroup.procs");
  if (!v1_dir_.empty()) out.push_back(v1_dir_ + "/cgroup.procs");
  return out;
}

result<std::uint64_t> job_cgroup::memory_bytes() const {
  if (v2_memory_ || !v1_dir_.empty()) {
    if (!stat_) {
      stat_ =
          std::make_unique<procfs::kernel_file>((v2_memory_ ? v2_dir_ : v1_dir_) + "/memory.stat");
    }
  }
  if (v2_memory_) {
    auto stat = stat_->read();
    if (!stat) return stat.error();
    return v2_memory_bytes(*stat);
  }
  if (!v1_dir_.empty()) {
    auto stat = stat_->read();
    if (!stat) return stat.error();
    std::optional<std::uint64_t> kmem;
    if (!kmem_)
      kmem_ = std::make_unique<procfs::kernel_file>(v1_dir_ + "/memory.kmem.usage_in_bytes");
    // Absent where the kernel has no v1 kmem accounting: anonymous memory alone then.
    if (auto k = kmem_->read()) {
      if (const auto v = parse_pids(*k); v.size() == 1) kmem = static_cast<std::uint64_t>(v[0]);
    }
    return v1_memory_bytes(*stat, kmem);
  }
  auto pids = members();
  if (!pids) return pids.error();
  std::uint64_t sum = 0;
  for (const auto pid : *pids) {
    if (auto r = procfs::rss_bytes_of(pid)) sum += *r;  // one that just exited holds nothing
  }
  return sum;
}

result<std::vector<std::int64_t>> job_cgroup::members() const {
  auto text = procfs::read_kernel_file(tracking_dir() + "/cgroup.procs");
  if (!text) return text.error();
  return parse_pids(*text);
}

status job_cgroup::signal_all(int signo) const {
  auto pids = members();
  if (!pids) return pids.error();
  for (const auto pid : *pids) ::kill(static_cast<pid_t>(pid), signo);  // ESRCH: gone, fine
  return {};
}

result<int> job_cgroup::kill_all(std::chrono::milliseconds wait) const {
  std::unordered_set<std::int64_t> seen;
  auto first = members();
  if (!first) {
    int err = 0;
    if (!procfs::read_kernel_file(tracking_dir() + "/cgroup.procs", &err) && err == ENOENT)
      return 0;
    return first.error();
  }
  for (const auto pid : *first) seen.insert(pid);
  // cgroup.kill (Linux 5.14) kills atomically: nothing forks its way out between scan and kill.
  bool killed_whole = false;
  if (!v2_dir_.empty()) killed_whole = static_cast<bool>(write_text(v2_dir_ + "/cgroup.kill", "1"));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (int round = 0;; ++round) {
    auto pids = round == 0 ? first : members();
    if (!pids) break;
    if (pids->empty()) break;
    for (const auto pid : *pids) {
      seen.insert(pid);
      if (!killed_whole || round > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 10 ? 1 : 5));
  }
  return static_cast<int>(seen.size());
}

status job_cgroup::remove() const {
  // Our open files would hold the removed cgroup's kernel objects until we closed them.
  stat_.reset();
  kmem_.reset();
  for (const auto& dir : {v2_dir_, v1_dir_}) {
    if (dir.empty()) continue;
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return make_error("remove cgroup " + dir + ": " + std::strerror(errno));
    }
  }
  return {};
}

status job_cgroup::add_process(std::int64_t pid) const {
  for (const auto& f : procs_files()) {
    if (auto s = write_text(f, std::to_string(pid)); !s) return s;
  }
  return {};
}

std::shared_ptr<job_cgroup> job_at(const hierarchy& h, const std::string& group) {
  const auto name = job_dir_name(group);
  return std::make_shared<job_cgroup>(name, h.v2_base.empty() ? "" : h.v2_base + "/" + name,
                                      h.v1_base.empty() ? "" : h.v1_base + "/" + name, h.v2_memory);
}

result<std::shared_ptr<job_cgroup>> open_job(const hierarchy& h, const std::string& group) {
  for (const auto& base : {h.v2_base, h.v1_base}) {
    if (base.empty()) continue;
    if (auto s = make_dir(base + "/" + job_dir_name(group)); !s) return s.error();
  }
  auto cg = job_at(h, group);
  if (auto left = cg->members(); left && !left->empty()) (void)cg->kill_all();
  return cg;
}

result<int> kill_leftovers(const hierarchy& h) {
  std::unordered_set<std::string> names;
  for (const auto& base : {h.v2_base, h.v1_base}) {
    if (base.empty()) continue;
    for (auto& n : job_dirs(base)) names.insert(std::move(n));
  }
  int killed = 0;
  std::string failures;
  for (const auto& n : names) {
    const job_cgroup cg(n, h.v2_base.empty() ? "" : h.v2_base + "/" + n,
                        h.v1_base.empty() ? "" : h.v1_base + "/" + n, h.v2_memory);
    auto k = cg.kill_all(std::chrono::milliseconds(1000));
    if (k) killed += *k;
    // Both hierarchies hold the same processes, but one that joined v1 only (a spawn that failed
    // half way) is seen there alone.
    if (!h.v1_base.empty() && !h.v2_base.empty()) {
      const job_cgroup v1_only(n, "", h.v1_base + "/" + n, false);
      if (auto k1 = v1_only.kill_all(std::chrono::milliseconds(1000))) killed += *k1;
    }
    if (auto s = cg.remove(); !s) failures += (failures.empty() ? "" : "; ") + s.error().message;
  }
  if (!failures.empty()) return make_error(failures);
  return killed;
}

status remove_empty(const hierarchy& h) {
  std::string busy;
  for (const auto& base : {h.v2_base, h.v1_base}) {
    if (base.empty()) continue;
    for (const auto& n : job_dirs(base)) {
      if (::rmdir((base + "/" + n).c_str()) != 0 && errno != ENOENT) busy += " " + base + "/" + n;
    }
    if (::rmdir(base.c_str()) != 0 && errno != ENOENT) busy += " " + base;
  }
  if (!busy.empty()) return make_error("cgroups still in use:" + busy);
  return {};
}

}  // namespace baton::os::cgroup
