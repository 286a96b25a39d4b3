// flock(2) on <state dir>/baton.lock. flock (not fcntl's record locks) because its lock belongs
// to the open file description: a second open in the same process conflicts too (tests rely on
// that), and closing some other descriptor of the file never drops it.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "os/posix/errno_text.h"
#include "os/state_lock.h"
#include "os/system.h"

namespace baton::os {

namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  off_t at = 0;
  while (out.size() < 4096) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return out;
}

class posix_state_lock final : public state_lock {
 public:
  posix_state_lock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  ~posix_state_lock() override { ::close(fd_); }  // closing the description releases the flock
  const std::filesystem::path& path() const override { return path_; }

 private:
  int fd_;
  std::filesystem::path path_;
};

class posix_state_locker final : public state_locker {
 public:
  boost::system::result<std::unique_ptr<state_lock>, lock_refusal> lock(
      const std::filesystem::path& dir, std::string_view role) override {
    const auto file = dir / state_lock_file_name;
    const auto io_failure = [&](const std::string& what, int err) {
      return lock_refusal{make_error("cannot lock state directory " + dir.string() + ": " + what +
                                     " " + file.string() + ": " + errno_text(err)),
                          false, std::nullopt};
    };
    // O_CLOEXEC: a worker must never inherit the lock and keep it after the daemon is gone.
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return io_failure("open", errno);
    const auto try_lock = [fd] {
      int rc;
      do {
        rc = ::flock(fd, LOCK_EX | LOCK_NB);
      } while (rc != 0 && errno == EINTR);
      return rc == 0 ? 0 : errno;
    };
    // A holder that is dead yet still holds the lock: a child it forked had not reached exec
    // (where O_CLOEXEC closes the copy) when it was SIGKILLed. That child execs or dies of
    // PR_SET_PDEATHSIG within moments, so wait for it rather than refuse a restart (the chaos
    // driver's daemon SIGKILL + restart met this once).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (int err = try_lock(); err != 0; err = try_lock()) {
      if (err != EWOULDBLOCK) {
        ::close(fd);
        return io_failure("flock", err);
      }
      // The holder writes its pid right after locking; a reader that comes in between sees an
      // empty file, so look twice.
      auto holder = parse_lock_holder(read_all(fd));
      if (!holder) {
        ::usleep(50 * 1000);
        holder = parse_lock_holder(read_all(fd));
      }
      const bool holder_gone = holder && holder->pid > 0 && holder->pid != current_pid() &&
                               ::kill(static_cast<pid_t>(holder->pid), 0) != 0 && errno == ESRCH;
      if (!holder_gone || std::chrono::steady_clock::now() >= deadline) {
        ::close(fd);
        std::string why = held_message(dir, file, holder);
        if (holder_gone) {
          why += " (that process is gone, but something it started still holds the lock)";
        }
        return lock_refusal{make_error(why), true, holder};
      }
      ::usleep(20 * 1000);
    }
    const std::string text = format_lock_holder({current_pid(), std::string(role)});
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      const int err = errno;
      ::close(fd);
      return io_failure("write", err);
    }
    return std::unique_ptr<state_lock>(std::make_unique<posix_state_lock>(fd, file));
  }
};

}  // namespace

state_locker& os_state_locker() {
  static posix_state_locker* locker = new posix_state_locker;  // never destroyed
  return *locker;
}

}  // namespace baton::os
