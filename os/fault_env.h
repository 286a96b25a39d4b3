// fault_env wraps another env and injects failures into its mutating operations, for tests of
// code that must survive a full disk, a failing fsync, a write that throws halfway, or a crash at
// any point (a callback at operation N that snapshots state or throws). It counts every mutating
// operation it forwards; reads (read_file, list_dir, file_exists, create_dirs) pass through
// uncounted. The wrapped env must outlive it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "os/env.h"

namespace baton::os {

class fault_env : public env {
 public:
  // `append` covers writable_file::write_at too: both write a file's bytes, and fail alike.
  enum class op { new_writable_file, append, sync, close, rename_file, remove_file, sync_dir };
  static std::string_view to_string(op o);

  // What an armed fault does when its operation comes.
  enum class action {
    fail_once,          // the Nth matching operation returns an error, later ones succeed
    fail_persistently,  // the Nth and every later matching operation returns an error
    half_append_throw,  // the Nth append writes the first half of its data, then throws
    callback,           // the Nth matching operation calls `callback` first, then proceeds
  };

  struct fault {
    action act = action::fail_once;
    std::int64_t nth = 1;    // 1-based, counting matching operations from when it was armed
    std::optional<op> only;  // count only this kind of operation (half_append_throw: append)
    std::string message = "injected fault";
    // For `callback`: may throw (a simulated crash); the operation then does not happen.
    std::function<void(op, const std::filesystem::path&)> callback;
  };

  // Thrown by half_append_throw.
  class injected_exception : public std::runtime_error {
   public:
    using std::runtime_error::runtime_error;
  };

  explicit fault_env(env& base);

  // Replaces any armed fault.
  void arm(fault f);
  void disarm();
  // Shorthands for the common cases.
  void fail_at(std::int64_t nth, std::string message, bool persistent = false,
               std::optional<op> only = std::nullopt);
  void throw_half_append_at(std::int64_t nth);
  void call_at(std::int64_t nth, std::function<void(op, const std::filesystem::path&)> cb,
               std::optional<op> only = std::nullopt);

  // Mutating operations forwarded (or failed) since construction, all kinds or one kind.
  std::int64_t op_count() const;
  std::int64_t op_count(op kind) const;
  // How many operations the armed fault has failed or called back on.
  std::int64_t faults_fired() const;

  result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) override;
  // Counted (and failed) as op::new_writable_file: both open a file for writing.
  result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) override;
  result<std::string> read_file(const std::filesystem::path& path) override;
  status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) override;
  status remove_file(const std::filesystem::path& path) override;
  status sync_dir(const std::filesystem::path& dir) override;
  status create_dirs(const std::filesystem::path& dir) override;
  bool file_exists(const std::filesystem::path& path) override;
  result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override;
  // Passed through uncounted, as the other reads are.
  result<std::unique_ptr<readable_file>> new_readable_file(
      const std::filesystem::path& path) override;
  result<std::unique_ptr<readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const untrusted_file_limits& limits) override;
  result<entry_info> stat_no_follow(const std::filesystem::path& path) override;
  // Counted and failed as `remove_file` and `sync`, which they generalise.
  status remove_dir_all(const std::filesystem::path& dir) override;
  status sync_file(const std::filesystem::path& path) override;

 private:
  class file;
  enum class verdict { proceed, fail, half_throw };
  struct decision {
    verdict v = verdict::proceed;
    std::string message;
    std::function<void(op, const std::filesystem::path&)> callback;
  };
  // Counts one operation and decides its fate; runs the callback outside the lock.
  decision next(op o, const std::filesystem::path& path);
  error injected(op o, const std::filesystem::path& path, const std::string& message) const;

  env& base_;
  mutable std::mutex mu_;
  std::int64_t counts_[7] = {};
  std::int64_t total_ = 0;
  std::optional<fault> fault_;
  std::int64_t matched_ = 0;
  std::int64_t fired_ = 0;
};

}  // namespace baton::os
