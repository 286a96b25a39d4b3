// POSIX env: plain open/write/fsync/rename with every errno reported by name.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "os/env.h"

namespace baton::os {

namespace {

// A full disk or quota carries errc::no_space: the caller pauses rather than fails.
error errno_error(const std::string& what, const std::filesystem::path& path, int err) {
  const bool full = err == ENOSPC || err == EDQUOT;
  return make_error(what + " " + path.string() + ": " + std::strerror(err),
                    full ? errc::no_space : errc::unspecified);
}

// Where an open descriptor's file really is, every link resolved; empty if the OS cannot say.
std::string resolved_path_of(int fd, const std::filesystem::path& path) {
#ifdef __linux__
  char buf[PATH_MAX + 1];
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(proc.c_str(), buf, PATH_MAX);
  if (n > 0) return std::string(buf, static_cast<std::size_t>(n));
#endif
  (void)fd;
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return {};
  std::string out(real);
  std::free(real);
  return out;
}

class posix_writable_file final : public writable_file {
 public:
  posix_writable_file(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~posix_writable_file() override {
    if (fd_ >= 0) ::close(fd_);
  }

  status append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("write", path_, errno);
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return {};
  }

  status sync() override {
    // A failed fsync is never retried: the kernel may have dropped the dirty pages already.
    if (::fsync(fd_) != 0) return errno_error("fsync", path_, errno);
    return {};
  }

  status close() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return errno_error("close", path_, errno);
    return {};
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

file_identity identity_of(const struct stat& st) {
  const auto ns = [](const timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
  };
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          ns(st.st_mtim), ns(st.st_ctim)};
}

class posix_readable_file final : public readable_file {
 public:
  posix_readable_file(std::filesystem::path path, int fd, std::uint64_t size,
                      std::optional<file_identity> identity = std::nullopt)
      : path_(std::move(path)), fd_(fd), size_(size), identity_(identity) {}
  ~posix_readable_file() override { ::close(fd_); }

  std::uint64_t size() const override { return size_; }
  std::optional<file_identity> identity() const override { return identity_; }

  status read(std::uint64_t offset, std::size_t n, std::string& out) override {
    out.resize(n);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, out.data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno_error("read", path_, errno);
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return {};
  }

 private:
  std::filesystem::path path_;
  int fd_;
  std::uint64_t size_;
  std::optional<file_identity> identity_;
};

class posix_env final : public env {
 public:
  result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error("open", path, errno);
    return std::unique_ptr<writable_file>(new posix_writable_file(path, fd));
  }

  result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error("open", path, errno);
    return std::unique_ptr<writable_file>(new posix_writable_file(path, fd));
  }

  result<std::string> read_file(const std::filesystem::path& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open", path, errno);
    std::string out;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return errno_error("read", path, err);
      }
      if (n == 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
  }

  result<std::unique_ptr<readable_file>> new_readable_file(
      const std::filesystem::path& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return errno_error("stat", path, err);
    }
    return std::unique_ptr<readable_file>(
        new posix_readable_file(path, fd, static_cast<std::uint64_t>(st.st_size)));
  }

  result<std::unique_ptr<readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const untrusted_file_limits& limits) override {
    const std::string what = path.string();
    // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer; on a regular file it
    // changes nothing. O_NOCTTY: a terminal device never becomes ours.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      if (errno == ELOOP) {
        return make_error(what + ": a symlink, not a regular file (links are not followed)");
      }
      return errno_error("open", path, errno);
    }
    struct closer {
      int fd;
      ~closer() {
        if (fd >= 0) ::close(fd);
      }
    } guard{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno_error("stat", path, errno);
    if (S_ISDIR(st.st_mode)) return make_error(what + ": a folder, not a regular file");
    if (!S_ISREG(st.st_mode)) {
      return make_error(what + ": a special file (FIFO, socket or device), not a regular file");
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > limits.max_bytes) {
      return make_error(what + ": " + describe_untrusted_size(size, limits.max_bytes));
    }
    if (!limits.within.empty()) {
      char* real_within = ::realpath(limits.within.c_str(), nullptr);
      if (real_within == nullptr) return errno_error("resolve", limits.within, errno);
      std::string within(real_within);
      std::free(real_within);
      if (within.empty() || within.back() != '/') within += '/';
      const std::string real = resolved_path_of(fd, path);
      if (real.empty()) return make_error(what + ": cannot tell where it resolves to");
      if (real.compare(0, within.size(), within) != 0) {
        return make_error(what + ": resolves to " + real + ", outside " + limits.within.string());
      }
    }
    guard.fd = -1;
    return std::unique_ptr<readable_file>(new posix_readable_file(path, fd, size, identity_of(st)));
  }

  status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return errno_error("rename " + from.string() + " to", to, errno);
    }
    return {};
  }

  status remove_file(const std::filesystem::path& path) override {
    if (::unlink(path.c_str()) != 0) return errno_error("remove", path, errno);
    return {};
  }

  status sync_dir(const std::filesystem::path& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_error("open folder", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return errno_error("fsync folder", dir, err);
    return {};
  }

  status create_dirs(const std::filesystem::path& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error("create folder " + dir.string() + ": " + ec.message());
    return {};
  }

  status remove_dir_all(const std::filesystem::path& dir) override {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) return make_error("remove " + dir.string() + ": " + ec.message());
    return {};
  }

  result<entry_info> stat_no_follow(const std::filesystem::path& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return entry_info{};
      return errno_error("stat", path, errno);
    }
    entry_info info;
    if (S_ISREG(st.st_mode)) {
      info.kind = entry_kind::regular;
      info.size = static_cast<std::uint64_t>(st.st_size);
      info.identity = identity_of(st);
    } else if (S_ISDIR(st.st_mode)) {
      info.kind = entry_kind::directory;
    } else if (S_ISLNK(st.st_mode)) {
      info.kind = entry_kind::symlink;
    } else {
      info.kind = entry_kind::other;
    }
    return info;
  }

  status sync_file(const std::filesystem::path& path) override {
    // O_NOFOLLOW: syncing is no reason to open whatever a link points at. fsync on a read-only
    // descriptor flushes the file's dirty pages all the same.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno_error("open", path, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return errno_error("fsync", path, err);
    return {};
  }

  bool file_exists(const std::filesystem::path& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }

  result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno_error("list folder", dir, errno);
    std::vector<std::string> names;
    while (const dirent* ent = ::readdir(d)) {
      const std::string_view name = ent->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

env& env::default_env() {
  static posix_env* instance = new posix_env;  // never destroyed: used from exit paths too
  return *instance;
}

}  // namespace baton::os
