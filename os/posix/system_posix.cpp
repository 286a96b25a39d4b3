#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>

#include "os/posix/proc_stat.h"
#include "os/self_memory.h"
#include "os/system.h"

namespace baton::os {

std::filesystem::path executable_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : p;
}

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }
bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

result<std::uint64_t> own_rss_bytes() { return procfs::rss_bytes_of(current_pid()); }

result<std::uint64_t> waited_children_peak_rss_bytes() {
  struct rusage u {};
  if (::getrusage(RUSAGE_CHILDREN, &u) != 0) {
    return make_error("getrusage(RUSAGE_CHILDREN) failed");
  }
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // Linux counts in KiB
}

std::int64_t current_pid() { return static_cast<std::int64_t>(::getpid()); }

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::filesystem::path default_state_dir() {
  if (auto d = get_env("BATON_STATE_DIR"); d && !d->empty()) return *d;
  if (auto d = get_env("XDG_STATE_HOME"); d && !d->empty()) {
    return std::filesystem::path(*d) / "baton";
  }
  if (auto h = get_env("HOME"); h && !h->empty()) {
    return std::filesystem::path(*h) / ".local" / "state" / "baton";
  }
  return std::filesystem::path("/tmp") / ("baton-state-" + std::to_string(::getuid()));
}

}  // namespace baton::os
