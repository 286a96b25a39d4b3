// A state lock makes one process the owner of a state directory, as SQLite and leveldb hold a
// lock file on their database: `baton serve` takes it for the daemon's whole life and `baton run`
// for its job's, so two supervisors never run the same jobs or hand out the same job id. The lock
// is an OS advisory lock on `<state dir>/baton.lock` (flock on POSIX, LockFileEx on Windows),
// never waited for, released by the kernel when the holder dies however it dies (a SIGKILL
// included), and never inherited by the workers (close-on-exec; a non-inheritable handle). The
// holder writes its pid and role into the file so a refused process can name it. The file itself
// stays behind on purpose: unlinking it would let a third process lock a fresh inode while a
// second still holds the old one.
//
// The caller owns the returned state_lock; destroying it releases the lock. A state_locker is how
// the daemon and `baton run` take it, so tests on a mem_env can pass an in-memory one
// (tests/support/mem_state_locker.h). Implementations: os/posix/state_lock_posix.cpp,
// os/windows/state_lock_windows.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "base/status.h"

namespace baton::os {

inline constexpr const char* state_lock_file_name = "baton.lock";

// Who holds a state directory, as the holder wrote it into the lock file.
struct lock_holder {
  std::int64_t pid = 0;
  std::string role;  // "baton serve", "baton run"
};

// The lock file's content: "<pid> <role>\n"; parse_lock_holder reads it back (nullopt when the
// text is not that, e.g. a holder that has not written it yet).
std::string format_lock_holder(const lock_holder& h);
std::optional<lock_holder> parse_lock_holder(std::string_view text);

// A held lock. Released (by the OS too, if the process dies) when destroyed.
class state_lock {
 public:
  virtual ~state_lock() = default;
  virtual const std::filesystem::path& path() const = 0;
};

// The outcome of one attempt: the lock, or the reason it was refused. `holder` is set when
// another process holds it (and said who); `held_by_other` tells that case from an I/O error.
struct lock_refusal {
  error why;
  bool held_by_other = false;
  std::optional<lock_holder> holder;
};
inline std::ostream& operator<<(std::ostream& os, const lock_refusal& r) { return os << r.why; }

class state_locker {
 public:
  virtual ~state_locker() = default;
  // Takes the lock on `dir` (which must exist) without waiting, recording this process's pid and
  // `role`. A refusal's message names the directory, the holder's role and pid, and the lock file.
  virtual boost::system::result<std::unique_ptr<state_lock>, lock_refusal> lock(
      const std::filesystem::path& dir, std::string_view role) = 0;
};

// The OS's lock file (flock / LockFileEx). Never destroyed.
state_locker& os_state_locker();

// "state directory D is in use by `ROLE` (pid N; lock file F)": the refusal message both
// implementations (and test doubles) give.
std::string held_message(const std::filesystem::path& dir, const std::filesystem::path& file,
                         const std::optional<lock_holder>& holder);

}  // namespace baton::os
