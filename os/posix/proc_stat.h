// Reading the Linux process table from /proc: who is whose parent (for walking a worker's
// descendants) and how much memory each process holds right now. The parsers are pure functions
// so they are tested on fixed text; the scanners tolerate processes vanishing mid-scan.
// Used by os/posix/process_posix.cpp only; Linux-specific.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::os::procfs {

// Reads a small kernel file (/proc, cgroupfs) whole: such files report size 0, so no fstat.
// `err_out`, when given, receives errno on failure.
result<std::string> read_kernel_file(const std::string& path, int* err_out = nullptr);

// One kernel file kept open and read again from its start at each read(): a sampler that reads
// the same cgroup or /proc file several times a second saves the open and close each time (the
// kernel regenerates a seq_file's text when it is read from offset 0). Not copyable; the fd is
// closed with the object. A file that went away (its cgroup removed, its process gone) fails
// read() with the kernel's error, and the next read() opens it again.
class kernel_file {
 public:
  explicit kernel_file(std::string path) : path_(std::move(path)) {}
  ~kernel_file();
  kernel_file(const kernel_file&) = delete;
  kernel_file& operator=(const kernel_file&) = delete;

  // The whole file now; valid until the next read(). `err_out` as for read_kernel_file.
  result<std::string_view> read(int* err_out = nullptr);
  const std::string& path() const { return path_; }

 private:
  void close_fd();
  std::string path_;
  int fd_ = -1;
  std::string buf_;
};

struct proc_entry {
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::int64_t pgid = 0;
  std::int64_t sid = 0;
  char state = '?';  // R, S, D, Z, T, ...
};

// Parses /proc/<pid>/stat. The command name is in parentheses and may itself hold spaces and
// ')', so fields are counted from the LAST ')'.
result<proc_entry> parse_stat(std::string_view text);

// Resident pages: the second field of /proc/<pid>/statm.
result<std::uint64_t> parse_statm_resident_pages(std::string_view text);

// Every process in /proc. Processes that exit during the scan are skipped.
result<std::vector<proc_entry>> list_processes();

// All descendants of `root` in `table` (children, grandchildren, ...), not `root` itself.
std::vector<std::int64_t> descendants_of(const std::vector<proc_entry>& table, std::int64_t root);

// Current resident bytes of one process; an error when it does not exist (any more).
result<std::uint64_t> rss_bytes_of(std::int64_t pid);

}  // namespace baton::os::procfs
