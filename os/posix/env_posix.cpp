// POSIX env: plain open/write/fsync/rename with every errno reported by name.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

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
  posix_writable_file(std::filesystem::path path, int fd, bool appending = false)
      : path_(std::move(path)), fd_(fd), appending_(appending) {}
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
      written_ += static_cast<std::uint64_t>(n);
    }
    start_writeback();
    return {};
  }

  // A big file (a checkpoint) goes to the disk while the rest of it is still being written, as
  // RocksDB's bytes_per_sync does: each full stretch is handed to writeback at once, without
  // waiting for it, so the fsync at the end waits for the last stretch instead of the whole file
  // (for the seed job's 48 MiB checkpoint, most of the fsync). Durability is still the fsync's:
  // this only starts the writes early. Small files never reach a stretch and cost nothing.
  void start_writeback() {
#ifdef __linux__
    constexpr std::uint64_t stretch = 8u << 20;
    if (written_ - handed_ < stretch) return;
    const std::uint64_t end = written_ - written_ % stretch;
    // A hint: where it fails (a file system without it), the fsync does all the work as before.
    (void)::sync_file_range(fd_, static_cast<off_t>(handed_), static_cast<off_t>(end - handed_),
                            SYNC_FILE_RANGE_WRITE);
    handed_ = end;
#endif
  }

  status write_at(std::uint64_t offset, std::string_view data) override {
    // Linux's pwrite on an O_APPEND descriptor appends whatever the offset (pwrite(2), BUGS).
    if (appending_) return make_error("write " + path_.string() + ": opened for appending");
    if (offset > written_ || data.size() > written_ - offset) {
      return make_error("write " + path_.string() + " at byte " + std::to_string(offset) + ": " +
                        std::to_string(data.size()) + " bytes run past the " +
                        std::to_string(written_) + " written");
    }
    while (!data.empty()) {
      const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("write", path_, errno);
      }
      data.remove_prefix(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
    }
    return {};
  }

  status truncate_to_written() override {
    if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
      return errno_error("truncate", path_, errno);
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
  bool appending_;             // O_APPEND: write_at cannot place bytes
  std::uint64_t written_ = 0;  // bytes appended so far
  std::uint64_t handed_ = 0;   // of which handed to writeback by start_writeback
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
  posix_readable_file(std::filesystem::path path, int fd, std::uint64_t size, uid_t owner,
                      std::optional<file_identity> identity = std::nullopt)
      : path_(std::move(path)), fd_(fd), size_(size), owner_(owner), identity_(identity) {}
  ~posix_readable_file() override { ::close(fd_); }

  std::uint64_t size() const override { return size_; }
  std::optional<std::uint32_t> owner_uid() const override { return owner_; }
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

  status read_into(std::uint64_t offset, std::span<char> out) override {
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t r =
          ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno_error("read", path_, errno);
      }
      if (r == 0) {
        return with_context("read " + path_.string(),
                            short_read_error(offset, out.size(), offset + got));
      }
      got += static_cast<std::size_t>(r);
    }
    return {};
  }

 private:
  std::filesystem::path path_;
  int fd_;
  std::uint64_t size_;
  std::uint32_t owner_;
  std::optional<file_identity> identity_;
};

// An open descriptor, closed when it goes.
class fd_holder {
 public:
  fd_holder() = default;
  explicit fd_holder(int fd) : fd_(fd) {}
  fd_holder(fd_holder&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_holder& operator=(fd_holder&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~fd_holder() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Where an operation's *at call aims: `name` resolved against `dir`. Unconfined: the whole path
// against AT_FDCWD. Confined (below the no-follow root): the last component against the
// descriptor of its folder, reached without following a link.
struct target {
  fd_holder held;  // the folder's descriptor when confined
  int dir = AT_FDCWD;
  std::string name;
  bool confined = false;
};

class posix_env final : public env {
 public:
  posix_env() = default;
  explicit posix_env(std::filesystem::path root) : root_(std::move(root)) {}

  result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) override {
    // Confined: no O_TRUNC before the entry is known to be a plain file of its own.
    auto f = open_file(path, O_WRONLY | O_CREAT, O_TRUNC);
    if (!f) return f.error();
    if (f->confined && ::ftruncate(f->fd.get(), 0) != 0) {
      return errno_error("truncate", path, errno);
    }
    return std::unique_ptr<writable_file>(new posix_writable_file(path, f->fd.release()));
  }

  result<std::unique_ptr<writable_file>> reuse_writable_file(
      const std::filesystem::path& path) override {
    // No O_CREAT and no O_TRUNC: the file's pages and blocks are what is being reused.
    auto f = open_file(path, O_WRONLY);
    if (!f) return f.error();
    return std::unique_ptr<writable_file>(new posix_writable_file(path, f->fd.release()));
  }

  result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) override {
    auto f = open_file(path, O_WRONLY | O_CREAT | O_APPEND);
    if (!f) return f.error();
    return std::unique_ptr<writable_file>(new posix_writable_file(path, f->fd.release(), true));
  }

  result<std::string> read_file(const std::filesystem::path& path) override {
    auto f = open_file(path, O_RDONLY);
    if (!f) return f.error();
    const int fd = f->fd.get();
    std::string out;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("read", path, errno);
      }
      if (n == 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }

  result<std::unique_ptr<readable_file>> new_readable_file(
      const std::filesystem::path& path) override {
    auto f = open_file(path, O_RDONLY);
    if (!f) return f.error();
    struct stat st {};
    if (::fstat(f->fd.get(), &st) != 0) return errno_error("stat", path, errno);
    return std::unique_ptr<readable_file>(new posix_readable_file(
        path, f->fd.release(), static_cast<std::uint64_t>(st.st_size), st.st_uid));
  }

  result<std::unique_ptr<readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const untrusted_file_limits& limits) override {
    const std::string what = path.string();
    auto t = locate(path);
    if (!t) return t.error();
    // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer; on a regular file it
    // changes nothing. O_NOCTTY: a terminal device never becomes ours.
    const int fd = ::openat(t->dir, t->name.c_str(),
                            O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      if (errno == ELOOP) {
        return make_error(what + ": a symlink, not a regular file (links are not followed)");
      }
      return errno_error("open", path, errno);
    }
    fd_holder guard(fd);
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
    return std::unique_ptr<readable_file>(
        new posix_readable_file(path, guard.release(), size, st.st_uid, identity_of(st)));
  }

  status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) override {
    auto a = locate(from);
    if (!a) return a.error();
    auto b = locate(to);
    if (!b) return b.error();
    if (::renameat(a->dir, a->name.c_str(), b->dir, b->name.c_str()) != 0) {
      return errno_error("rename " + from.string() + " to", to, errno);
    }
    return {};
  }

  status remove_file(const std::filesystem::path& path) override {
    auto t = locate(path);
    if (!t) return t.error();
    if (::unlinkat(t->dir, t->name.c_str(), 0) != 0) return errno_error("remove", path, errno);
    return {};
  }

  status sync_dir(const std::filesystem::path& dir) override {
    auto t = locate(dir);
    if (!t) return t.error();
    const int fd =
        ::openat(t->dir, t->name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow(*t));
    if (fd < 0) return errno_error("open folder", dir, errno);
    fd_holder guard(fd);
    if (::fsync(fd) != 0) return errno_error("fsync folder", dir, errno);
    return {};
  }

  status create_dirs(const std::filesystem::path& dir) override {
    auto rel = below_root(dir);
    if (!rel) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return make_error("create folder " + dir.string() + ": " + ec.message());
      return {};
    }
    // The root by its trusted path, then each component below it made or entered without
    // following a link.
    std::error_code ec;
    std::filesystem::create_directories(root_, ec);
    if (ec) return make_error("create folder " + root_.string() + ": " + ec.message());
    fd_holder cur(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (cur.get() < 0) return errno_error("open folder", root_, errno);
    for (const auto& part : *rel) {
      if (::mkdirat(cur.get(), part.c_str(), 0777) != 0 && errno != EEXIST) {
        return errno_error("create folder", dir, errno);
      }
      fd_holder next(
          ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      if (next.get() < 0) return confined_dir_error(dir, part, errno);
      cur = std::move(next);
    }
    return {};
  }

  status remove_dir_all(const std::filesystem::path& dir) override {
    auto t = locate(dir);
    if (!t) return t.error();
    if (!t->confined) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      if (ec) return make_error("remove " + dir.string() + ": " + ec.message());
      return {};
    }
    if (auto s = remove_tree_at(t->dir, t->name, 0); !s) {
      return make_error("remove " + dir.string() + ": " + s.error().message);
    }
    return {};
  }

  result<entry_info> stat_no_follow(const std::filesystem::path& path) override {
    auto t = locate(path);
    if (!t) {
      // A folder on the way that is a link or missing: no entry there, as lstat would say of a
      // missing folder (the link is not followed to find one).
      return entry_info{};
    }
    struct stat st {};
    if (::fstatat(t->dir, t->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return entry_info{};
      return errno_error("stat", path, errno);
    }
    entry_info info;
    info.owner_uid = st.st_uid;
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
    auto t = locate(path);
    if (!t) return t.error();
    // O_NOFOLLOW: syncing is no reason to open whatever a link points at. fsync on a read-only
    // descriptor flushes the file's dirty pages all the same.
    const int fd =
        ::openat(t->dir, t->name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return errno_error("open", path, errno);
    fd_holder guard(fd);
    if (::fsync(fd) != 0) return errno_error("fsync", path, errno);
    return {};
  }

  status set_owner(const std::filesystem::path& path, std::uint32_t uid, std::uint32_t gid,
                   unsigned mode) override {
    auto t = locate(path);
    if (!t) return t.error();
    const int fd =
        ::openat(t->dir, t->name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return open_error(path, errno);
    fd_holder guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno_error("stat", path, errno);
    if (!S_ISDIR(st.st_mode) && !(S_ISREG(st.st_mode) && st.st_nlink == 1)) {
      return make_error("chown " + path.string() + ": not a folder or a plain file");
    }
    if (::fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0) {
      return errno_error("chown", path, errno);
    }
    if (::fchmod(fd, static_cast<mode_t>(mode & 07777)) != 0) {
      return errno_error("chmod", path, errno);
    }
    return {};
  }

  bool file_exists(const std::filesystem::path& path) override {
    auto t = locate(path);
    if (!t) return false;
    struct stat st {};
    return ::fstatat(t->dir, t->name.c_str(), &st, t->confined ? AT_SYMLINK_NOFOLLOW : 0) == 0;
  }

  result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override {
    auto t = locate(dir);
    if (!t) return t.error();
    const int fd =
        ::openat(t->dir, t->name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow(*t));
    if (fd < 0) return errno_error("list folder", dir, errno);
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      const int err = errno;
      ::close(fd);
      return errno_error("list folder", dir, err);
    }
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

 private:
  static int nofollow(const target& t) { return t.confined ? O_NOFOLLOW : 0; }
  // Confined opens never follow a link and never wait for a FIFO's writer.
  static int extra_open_flags(const target& t) {
    return t.confined ? O_NOFOLLOW | O_NONBLOCK | O_NOCTTY : 0;
  }

  static error open_error(const std::filesystem::path& path, int err) {
    if (err == ELOOP) {
      return make_error("open " + path.string() + ": a symlink (links are not followed here)");
    }
    return errno_error("open", path, err);
  }

  static error confined_dir_error(const std::filesystem::path& path, const std::string& part,
                                  int err) {
    if (err == ELOOP || err == ENOTDIR) {
      return make_error(path.string() + ": \"" + part +
                        "\" on the way is not a folder (links are not followed here)");
    }
    return errno_error("open folder", path, err);
  }

  // A file another user could have put in place: only a regular file with a single name, so
  // neither a FIFO nor a hard link to someone else's file is read, written or truncated.
  static status check_plain_file(int fd, const std::filesystem::path& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno_error("stat", path, errno);
    if (!S_ISREG(st.st_mode)) {
      return make_error(path.string() + ": not a regular file (a folder, FIFO or device)");
    }
    if (st.st_nlink != 1) {
      return make_error(path.string() + ": has " + std::to_string(st.st_nlink) +
                        " links; a file with other names is not opened here");
    }
    return {};
  }

  // The components of `path` below root_, or nullopt when it is not below it (or is root_).
  std::optional<std::vector<std::string>> below_root(const std::filesystem::path& path) const {
    if (root_.empty()) return std::nullopt;
    std::error_code ec;
    auto abs = std::filesystem::absolute(path, ec);
    if (ec) return std::nullopt;
    abs = abs.lexically_normal();
    auto r = root_.begin();
    auto p = abs.begin();
    for (; r != root_.end() && !r->empty(); ++r, ++p) {
      if (p == abs.end() || *p != *r) return std::nullopt;
    }
    std::vector<std::string> rest;
    for (; p != abs.end(); ++p) {
      if (p->empty() || *p == ".") continue;  // a trailing separator
      rest.push_back(p->string());
    }
    if (rest.empty()) return std::nullopt;
    return rest;
  }

  struct opened {
    fd_holder fd;
    bool confined = false;
  };

  // Every open of a file by path: located (confined below the root: the last component against
  // its folder's descriptor, reached without following a link), opened with `flags` plus
  // O_CLOEXEC and the confined flags, and, when confined, checked to be a plain file of one
  // link. `unconfined_only` flags (O_TRUNC) apply only where that check is not needed first.
  result<opened> open_file(const std::filesystem::path& path, int flags,
                           int unconfined_only = 0) const {
    auto t = locate(path);
    if (!t) return t.error();
    if (!t->confined) flags |= unconfined_only;
    const int fd =
        ::openat(t->dir, t->name.c_str(), flags | O_CLOEXEC | extra_open_flags(*t), 0644);
    if (fd < 0) return open_error(path, errno);
    opened out{fd_holder(fd), t->confined};
    if (t->confined) {
      if (auto s = check_plain_file(fd, path); !s) return s.error();
    }
    return out;
  }

  result<target> locate(const std::filesystem::path& path) const {
    target t;
    auto rel = below_root(path);
    if (!rel) {
      t.name = path.string();
      return t;
    }
    t.confined = true;
    fd_holder cur(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (cur.get() < 0) return errno_error("open folder", root_, errno);
    for (std::size_t i = 0; i + 1 < rel->size(); ++i) {
      const auto& part = (*rel)[i];
      if (part == "..") return make_error(path.string() + ": \"..\" is not allowed here");
      fd_holder next(
          ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      if (next.get() < 0) {
        if (errno == ENOENT) return errno_error("open", path, errno);
        return confined_dir_error(path, part, errno);
      }
      cur = std::move(next);
    }
    t.name = rel->back();
    if (t.name == "..") return make_error(path.string() + ": \"..\" is not allowed here");
    t.dir = cur.get();
    t.held = std::move(cur);
    return t;
  }

  // Removes `name` in `dir` and, for a folder, everything in it, each folder entered by a
  // descriptor opened without following links: a link is removed, never followed, and a folder
  // swapped for a link meanwhile is not entered. Depth is bounded so a hostile tree cannot
  // exhaust the stack or the descriptors.
  static status remove_tree_at(int dir, const std::string& name, int depth) {
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return {};
      return make_error(name + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
        return make_error(name + ": " + std::strerror(errno));
      }
      return {};
    }
    if (depth > 64) return make_error(name + ": folders nested deeper than 64 levels");
    const int fd =
        ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return make_error(name + ": " + std::strerror(errno));
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      const int err = errno;
      ::close(fd);
      return make_error(name + ": " + std::strerror(err));
    }
    std::vector<std::string> names;
    while (const dirent* ent = ::readdir(d)) {
      const std::string_view n = ent->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
    }
    status out;
    for (const auto& n : names) {
      if (auto s = remove_tree_at(::dirfd(d), n, depth + 1); !s && out) out = s;
    }
    ::closedir(d);
    if (!out) return out;
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return make_error(name + ": " + std::strerror(errno));
    }
    return {};
  }

  std::filesystem::path root_;  // empty: nothing is confined
};

}  // namespace

env& env::default_env() {
  static posix_env* instance = new posix_env;  // never destroyed: used from exit paths too
  return *instance;
}

result<std::unique_ptr<env>> make_no_follow_env(const std::filesystem::path& root) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(root, ec);
  if (ec || root.empty())
    return make_error("no-follow env: cannot make " + root.string() + " absolute");
  abs = abs.lexically_normal();
  if (!abs.has_filename()) abs = abs.parent_path();  // no trailing separator
  return std::unique_ptr<env>(new posix_env(std::move(abs)));
}

}  // namespace baton::os
