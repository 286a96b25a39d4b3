#include "os/posix/proc_stat.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace baton::os::procfs {

result<std::string> read_kernel_file(const std::string& path, int* err_out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (err_out != nullptr) *err_out = errno;
    return make_error("open " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      if (err_out != nullptr) *err_out = err;
      return make_error("read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

kernel_file::~kernel_file() { close_fd(); }

void kernel_file::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

result<std::string_view> kernel_file::read(int* err_out) {
  auto fail = [&](const char* what, int err) -> result<std::string_view> {
    close_fd();
    if (err_out != nullptr) *err_out = err;
    return make_error(std::string(what) + " " + path_ + ": " + std::strerror(err));
  };
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return fail("open", errno);
  }
  if (buf_.size() < 4096) buf_.resize(4096);
  std::size_t used = 0;
  for (;;) {
    if (used == buf_.size()) buf_.resize(buf_.size() * 2);
    const ssize_t n =
        ::pread(fd_, buf_.data() + used, buf_.size() - used, static_cast<off_t>(used));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("read", errno);
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  return std::string_view(buf_.data(), used);
}

namespace {

// Next space-separated field of `s`, advancing it.
std::string_view next_field(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const auto end = s.find_first_of(" \n");
  const auto field = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return field;
}

template <class Int>
bool parse_int(std::string_view s, Int& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

}  // namespace

result<proc_entry> parse_stat(std::string_view text) {
  proc_entry e;
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return make_error("/proc stat: no command name in parentheses");
  }
  if (!parse_int(text.substr(0, open == 0 ? 0 : open - 1), e.pid)) {
    return make_error("/proc stat: bad pid field");
  }
  std::string_view rest = text.substr(close + 1);
  const auto state = next_field(rest);
  if (state.size() != 1) return make_error("/proc stat: bad state field");
  e.state = state[0];
  if (!parse_int(next_field(rest), e.ppid)) return make_error("/proc stat: bad ppid field");
  if (!parse_int(next_field(rest), e.pgid)) return make_error("/proc stat: bad pgrp field");
  if (!parse_int(next_field(rest), e.sid)) return make_error("/proc stat: bad session field");
  return e;
}

result<std::uint64_t> parse_statm_resident_pages(std::string_view text) {
  next_field(text);  // size
  std::uint64_t pages = 0;
  if (!parse_int(next_field(text), pages)) return make_error("/proc statm: bad resident field");
  return pages;
}

result<std::vector<proc_entry>> list_processes() {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return make_error(std::string("list /proc: ") + std::strerror(errno));
  std::vector<proc_entry> table;
  while (const dirent* ent = ::readdir(d)) {
    std::int64_t pid = 0;
    if (!parse_int(std::string_view(ent->d_name), pid)) continue;
    auto text = read_kernel_file("/proc/" + std::string(ent->d_name) + "/stat");
    if (!text) continue;  // exited since readdir: not an error
    auto entry = parse_stat(*text);
    if (!entry) {
      ::closedir(d);
      return with_context("/proc/" + std::string(ent->d_name), entry.error());
    }
    table.push_back(*entry);
  }
  ::closedir(d);
  return table;
}

std::vector<std::int64_t> descendants_of(const std::vector<proc_entry>& table, std::int64_t root) {
  std::unordered_multimap<std::int64_t, std::int64_t> children;
  for (const auto& e : table) children.emplace(e.ppid, e.pid);
  std::vector<std::int64_t> out;
  // A scan is not atomic: with pid reuse it can hold a cycle, which `seen` stops.
  std::unordered_set<std::int64_t> seen{root};
  std::vector<std::int64_t> todo{root};
  while (!todo.empty()) {
    const auto parent = todo.back();
    todo.pop_back();
    const auto [b, e] = children.equal_range(parent);
    for (auto it = b; it != e; ++it) {
      if (!seen.insert(it->second).second) continue;
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

result<std::uint64_t> rss_bytes_of(std::int64_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/statm";
  auto text = read_kernel_file(path);
  if (!text) return text.error();
  auto pages = parse_statm_resident_pages(*text);
  if (!pages) return with_context(path, pages.error());
  static const long page_size = ::sysconf(_SC_PAGESIZE);
  return *pages * static_cast<std::uint64_t>(page_size);
}

}  // namespace baton::os::procfs
