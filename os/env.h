// env is the door to the operating system for files (after leveldb's Env): job records,
// checkpoints and settings are read and written through it, so tests can swap in an in-memory or
// fault-injecting env. Not every file access does yet: some supervisor log appends and reads
// still go to the filesystem directly. make_no_follow_env() is the variant for folders another
// user owns (system mode's job folders). Implementations: os/posix/env_posix.cpp,
// os/windows/env_windows.cpp, os/mem_env.h, os/fault_env.h (wraps another env).
// An env is shared and outlives every file it hands out; callers own the returned files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::os {

// Which file an entry is and which version of its content, as far as the OS tells: POSIX gives
// the device and inode, and the modification and status-change times (both move on any write,
// and a reset of the modification time moves the change time). Seen again unchanged, with the
// same size, the file was neither replaced nor written since, so what was read from it then
// still holds (the supervisor then need not read a checkpoint again before the next spawn).
struct file_identity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t modified_ns = 0;
  std::int64_t changed_ns = 0;
  bool operator==(const file_identity&) const = default;
};

// A file opened for writing from scratch. Nothing is durable until sync() returns success.
class writable_file {
 public:
  virtual ~writable_file() = default;
  virtual status append(std::string_view data) = 0;
  virtual status sync() = 0;  // fsync / FlushFileBuffers: data reached the disk
  virtual status close() = 0;
  // Cuts the file to what this handle wrote: after env::reuse_writable_file, whatever the old
  // content had past it goes. A file opened from scratch has nothing past it.
  virtual status truncate_to_written() { return {}; }
  // Writes `data` over bytes this handle already appended, at file offset `offset` (offset +
  // size at most what it appended), for a field known only once the rest is out: a checkpoint's
  // digest sits in its header, and patching it in after one pass over the tensors saves hashing
  // them twice. Appends still go after the last byte appended. Files opened for appending
  // (new_appendable_file) refuse, as their writes all land at the end (POSIX O_APPEND).
  virtual status write_at(std::uint64_t offset, std::string_view data) = 0;
};

// A file opened for reading at any offset, so a large file can be read a piece at a time.
class readable_file {
 public:
  virtual ~readable_file() = default;
  virtual std::uint64_t size() const = 0;  // as of opening
  // Replaces `out` with the `n` bytes at `offset`, fewer only past the end of the file.
  virtual status read(std::uint64_t offset, std::size_t n, std::string& out) = 0;
  // Fills all of `out` with the bytes at `offset`, straight into that memory where the OS allows
  // (pread, ReadFile), so a large file can land in its final buffers without passing through
  // another; an error naming where the file ended if it ends first. The default goes through
  // read() a bounded piece at a time, for envs that hold their files in memory.
  virtual status read_into(std::uint64_t offset, std::span<char> out);
  // The uid that owns the opened file (fstat on the handle, so nothing can be swapped in
  // between); unset where the env has no owners (in memory, Windows).
  virtual std::optional<std::uint32_t> owner_uid() const { return std::nullopt; }
  // The identity of the file as opened, where the env tells (see file_identity).
  virtual std::optional<file_identity> identity() const { return std::nullopt; }
};

// What an entry is, seen without following a symlink (lstat / symlink_status), so a checkpoint
// folder can refuse links and special files that would lead its readers elsewhere.
enum class entry_kind { missing, regular, directory, symlink, other };

struct entry_info {
  entry_kind kind = entry_kind::missing;
  std::uint64_t size = 0;                  // regular files only
  std::optional<std::uint32_t> owner_uid;  // unset where the env has no owners
  // Regular files, where the env can tell (POSIX, mem_env); nullopt elsewhere (Windows for now),
  // which makes every check that relies on it take the slow path. new_untrusted_readable_file's
  // files give theirs as opened.
  std::optional<file_identity> identity;
};

// What a file another process controls (a checkpoint a worker announced) must be before it is
// read: see env::new_untrusted_readable_file.
struct untrusted_file_limits {
  std::uint64_t max_bytes = 0;
  // The file must resolve, after every link in the folders above it, to a path inside this
  // folder. Empty: anywhere.
  std::filesystem::path within;
};

class env {
 public:
  virtual ~env() = default;

  // Creates or truncates `path`.
  virtual result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) = 0;
  // Opens the existing file `path` to be written again from its start, keeping its disk blocks
  // and cached pages rather than freeing them and allocating new ones; the writer ends with
  // writable_file::truncate_to_written. For a file of the same size rewritten again and again
  // (checkpoint_store's spare). The default truncates, as new_writable_file does.
  virtual result<std::unique_ptr<writable_file>> reuse_writable_file(
      const std::filesystem::path& path) {
    return new_writable_file(path);
  }
  // Opens `path` for appending, creating it if missing: every append lands at the end of the
  // file, even when another process (a worker's stderr) appends to it too. For logs.
  // Envs that never hold logs may refuse.
  virtual result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) {
    return make_error("append to " + path.string() + ": not supported by this env");
  }
  virtual result<std::string> read_file(const std::filesystem::path& path) = 0;
  // The default reads the whole file up front (fine for envs that keep files in memory anyway);
  // envs over a real disk override it to read only what is asked for.
  virtual result<std::unique_ptr<readable_file>> new_readable_file(
      const std::filesystem::path& path);
  // Opens a file that another process (a worker) controls so that it cannot hurt the reader:
  // a symlink as the last component is refused, not followed (O_NOFOLLOW); the open never waits
  // for a FIFO's writer or a device (O_NONBLOCK); the opened file must be a regular file of at
  // most limits.max_bytes (checked on the open handle, so nothing can be swapped in between);
  // and it must resolve to a path inside limits.within. Errors name the path and what it is.
  // The default checks stat_no_follow first, for envs without links or special files.
  virtual result<std::unique_ptr<readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const untrusted_file_limits& limits);
  // Atomically replaces `to` with `from` (rename(2); MoveFileExW with REPLACE_EXISTING).
  virtual status rename_file(const std::filesystem::path& from,
                             const std::filesystem::path& to) = 0;
  virtual status remove_file(const std::filesystem::path& path) = 0;
  // Makes a directory's entries (a rename into it) durable. A no-op where the OS has no such call.
  virtual status sync_dir(const std::filesystem::path& dir) = 0;
  virtual status create_dirs(const std::filesystem::path& dir) = 0;
  virtual bool file_exists(const std::filesystem::path& path) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) = 0;
  // Removes a folder and everything in it. Envs without folders of their own may refuse.
  virtual status remove_dir_all(const std::filesystem::path& dir) {
    return make_error("remove " + dir.string() + ": not supported by this env");
  }
  // The entry at `path` itself (a symlink is reported as one, never followed). A missing entry is
  // kind `missing`, not an error; an error means the OS could not tell.
  virtual result<entry_info> stat_no_follow(const std::filesystem::path& path) {
    return make_error("stat " + path.string() + ": not supported by this env");
  }
  // Makes an existing file's content durable (fsync / FlushFileBuffers) without rewriting it,
  // for files another process wrote and closed.
  virtual status sync_file(const std::filesystem::path& path) {
    return make_error("fsync " + path.string() + ": not supported by this env");
  }
  // Gives an existing entry (not a link: never followed) to `uid`:`gid` with permission bits
  // `mode`, on the opened entry (fchown, fchmod): a job's folder handed to the user its workers
  // run as. Needs root where uid is not ours.
  virtual status set_owner(const std::filesystem::path& path, std::uint32_t uid, std::uint32_t gid,
                           unsigned mode) {
    (void)uid, (void)gid, (void)mode;
    return make_error("chown " + path.string() + ": not supported by this env");
  }

  // The process-wide env of this OS. Never destroyed.
  static env& default_env();
};

// An env over this OS's disk, as default_env(), except below `root` (a folder the supervisor
// trusts, holding folders that less trusted users own: the job folders of system mode, which a
// worker's user may fill with links and FIFOs): there no symlink is ever followed, in any
// component below `root` (each one is opened with O_NOFOLLOW from the descriptor of the one
// above, `..` refused), a file is opened only if it is a regular file with one link (no FIFO
// can block the reader, no hard link can aim a write at another file), O_TRUNC happens after
// that check, and remove_dir_all walks by descriptor. `root` itself is trusted as it is.
// Windows: an error (there is no system mode there).
result<std::unique_ptr<env>> make_no_follow_env(const std::filesystem::path& root);

// The error of a read_into that met the end of the file at byte `got_to`, shared by the envs.
error short_read_error(std::uint64_t offset, std::size_t wanted, std::uint64_t got_to);

// "N bytes, larger than the cap of M bytes for a checkpoint", shared by the envs' messages.
std::string describe_untrusted_size(std::uint64_t size, std::uint64_t max_bytes);

// Replaces `path` with `data` so that a crash at any moment leaves either the old or the new
// content, whole: write a temp file in the same folder, sync it, rename it over `path`, sync the
// folder. On any failure the temp file is removed (best effort) and `path` is untouched.
status write_file_atomic(env& e, const std::filesystem::path& path, std::string_view data);

// The same, with the content produced by `write`, which appends it to the temp file in as many
// pieces as it likes (a large file is then never held in memory whole). An error from `write`
// fails the save like a failed append: the temp file is removed and `path` is untouched.
status write_file_atomic(env& e, const std::filesystem::path& path,
                         const std::function<status(writable_file&)>& write);
// As above, but when `reuse` names a file, it is renamed to the temp name and written over
// (env::reuse_writable_file) instead of a new temp file being made: its pages and blocks are
// reused. A `reuse` that cannot be renamed (missing) is no error: a new file is made then.
status write_file_atomic(env& e, const std::filesystem::path& path,
                         const std::function<status(writable_file&)>& write,
                         const std::filesystem::path& reuse);

// The marker in every temp file name write_file_atomic makes (and the Python package too):
// "<name>.tmp-<tag>".
inline constexpr std::string_view temp_file_marker = ".tmp-";

// Removes the temp files directly in `dir` (names with temp_file_marker): what writes killed
// halfway left behind. Links are removed, never followed; folders are left alone (not ours).
// Only while nobody writes there. Returns how many it removed; a missing `dir` holds none.
result<int> remove_temp_files(env& e, const std::filesystem::path& dir);

}  // namespace baton::os
