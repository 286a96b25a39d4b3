#include "os/fault_env.h"

namespace baton::os {

class fault_env::file final : public writable_file {
 public:
  file(fault_env& e, std::filesystem::path path, std::unique_ptr<writable_file> inner)
      : env_(e), path_(std::move(path)), inner_(std::move(inner)) {}

  status append(std::string_view data) override {
    auto d = env_.next(op::append, path_);
    if (d.v == verdict::fail) return env_.injected(op::append, path_, d.message);
    if (d.v == verdict::half_throw) {
      (void)inner_->append(data.substr(0, data.size() / 2));
      throw injected_exception("append to " + path_.string() + " threw after " +
                               std::to_string(data.size() / 2) + " of " +
                               std::to_string(data.size()) + " bytes: " + d.message);
    }
    return inner_->append(data);
  }
  // A write like append as far as faults go: the same failures, counted with them.
  status write_at(std::uint64_t offset, std::string_view data) override {
    auto d = env_.next(op::append, path_);
    if (d.v == verdict::fail) return env_.injected(op::append, path_, d.message);
    if (d.v == verdict::half_throw) {
      (void)inner_->write_at(offset, data.substr(0, data.size() / 2));
      throw injected_exception("write to " + path_.string() + " threw after " +
                               std::to_string(data.size() / 2) + " of " +
                               std::to_string(data.size()) + " bytes: " + d.message);
    }
    return inner_->write_at(offset, data);
  }
  status sync() override {
    auto d = env_.next(op::sync, path_);
    if (d.v == verdict::fail) return env_.injected(op::sync, path_, d.message);
    return inner_->sync();
  }
  status close() override {
    auto d = env_.next(op::close, path_);
    if (d.v == verdict::fail) return env_.injected(op::close, path_, d.message);
    return inner_->close();
  }

 private:
  fault_env& env_;
  std::filesystem::path path_;
  std::unique_ptr<writable_file> inner_;
};

std::string_view fault_env::to_string(op o) {
  switch (o) {
    case op::new_writable_file:
      return "open";
    case op::append:
      return "write";
    case op::sync:
      return "fsync";
    case op::close:
      return "close";
    case op::rename_file:
      return "rename";
    case op::remove_file:
      return "remove";
    case op::sync_dir:
      return "fsync folder";
  }
  return "?";
}

fault_env::fault_env(env& base) : base_(base) {}

void fault_env::arm(fault f) {
  std::lock_guard lock(mu_);
  if (f.act == action::half_append_throw) f.only = op::append;
  fault_ = std::move(f);
  matched_ = 0;
  fired_ = 0;
}

void fault_env::disarm() {
  std::lock_guard lock(mu_);
  fault_.reset();
}

void fault_env::fail_at(std::int64_t nth, std::string message, bool persistent,
                        std::optional<op> only) {
  fault f;
  f.act = persistent ? action::fail_persistently : action::fail_once;
  f.nth = nth;
  f.only = only;
  f.message = std::move(message);
  arm(std::move(f));
}

void fault_env::throw_half_append_at(std::int64_t nth) {
  fault f;
  f.act = action::half_append_throw;
  f.nth = nth;
  arm(std::move(f));
}

void fault_env::call_at(std::int64_t nth, std::function<void(op, const std::filesystem::path&)> cb,
                        std::optional<op> only) {
  fault f;
  f.act = action::callback;
  f.nth = nth;
  f.only = only;
  f.callback = std::move(cb);
  arm(std::move(f));
}

std::int64_t fault_env::op_count() const {
  std::lock_guard lock(mu_);
  return total_;
}

std::int64_t fault_env::op_count(op kind) const {
  std::lock_guard lock(mu_);
  return counts_[static_cast<int>(kind)];
}

std::int64_t fault_env::faults_fired() const {
  std::lock_guard lock(mu_);
  return fired_;
}

fault_env::decision fault_env::next(op o, const std::filesystem::path& path) {
  decision d;
  {
    std::lock_guard lock(mu_);
    ++total_;
    ++counts_[static_cast<int>(o)];
    if (!fault_ || (fault_->only && *fault_->only != o)) return d;
    const std::int64_t n = ++matched_;
    const bool hit =
        n == fault_->nth || (fault_->act == action::fail_persistently && n > fault_->nth);
    if (!hit) return d;
    ++fired_;
    d.message = fault_->message;
    switch (fault_->act) {
      case action::fail_once:
      case action::fail_persistently:
        d.v = verdict::fail;
        break;
      case action::half_append_throw:
        d.v = verdict::half_throw;
        break;
      case action::callback:
        d.callback = fault_->callback;
        break;
    }
  }
  if (d.callback) d.callback(o, path);
  return d;
}

error fault_env::injected(op o, const std::filesystem::path& path,
                          const std::string& message) const {
  // An injected full disk carries the code a real one does (env_posix: ENOSPC, EDQUOT).
  const bool full = message.find("No space left on device") != std::string::npos ||
                    message.find("Disk quota exceeded") != std::string::npos;
  return make_error(std::string(to_string(o)) + " " + path.string() + ": " + message,
                    full ? errc::no_space : errc::unspecified);
}

result<std::unique_ptr<writable_file>> fault_env::new_writable_file(
    const std::filesystem::path& path) {
  auto d = next(op::new_writable_file, path);
  if (d.v == verdict::fail) return injected(op::new_writable_file, path, d.message);
  auto inner = base_.new_writable_file(path);
  if (!inner) return inner.error();
  return std::unique_ptr<writable_file>(new file(*this, path, std::move(*inner)));
}

result<std::unique_ptr<writable_file>> fault_env::new_appendable_file(
    const std::filesystem::path& path) {
  auto d = next(op::new_writable_file, path);
  if (d.v == verdict::fail) return injected(op::new_writable_file, path, d.message);
  auto inner = base_.new_appendable_file(path);
  if (!inner) return inner.error();
  return std::unique_ptr<writable_file>(new file(*this, path, std::move(*inner)));
}

result<std::string> fault_env::read_file(const std::filesystem::path& path) {
  return base_.read_file(path);
}

status fault_env::rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  auto d = next(op::rename_file, from);
  if (d.v == verdict::fail) {
    return make_error("rename " + from.string() + " to " + to.string() + ": " + d.message);
  }
  return base_.rename_file(from, to);
}

status fault_env::remove_file(const std::filesystem::path& path) {
  auto d = next(op::remove_file, path);
  if (d.v == verdict::fail) return injected(op::remove_file, path, d.message);
  return base_.remove_file(path);
}

status fault_env::sync_dir(const std::filesystem::path& dir) {
  auto d = next(op::sync_dir, dir);
  if (d.v == verdict::fail) return injected(op::sync_dir, dir, d.message);
  return base_.sync_dir(dir);
}

status fault_env::create_dirs(const std::filesystem::path& dir) { return base_.create_dirs(dir); }

bool fault_env::file_exists(const std::filesystem::path& path) { return base_.file_exists(path); }

result<std::vector<std::string>> fault_env::list_dir(const std::filesystem::path& dir) {
  return base_.list_dir(dir);
}

result<std::unique_ptr<readable_file>> fault_env::new_readable_file(
    const std::filesystem::path& path) {
  return base_.new_readable_file(path);
}

result<std::unique_ptr<readable_file>> fault_env::new_untrusted_readable_file(
    const std::filesystem::path& path, const untrusted_file_limits& limits) {
  return base_.new_untrusted_readable_file(path, limits);
}

result<entry_info> fault_env::stat_no_follow(const std::filesystem::path& path) {
  return base_.stat_no_follow(path);
}

status fault_env::remove_dir_all(const std::filesystem::path& dir) {
  auto d = next(op::remove_file, dir);
  if (d.v == verdict::fail) return injected(op::remove_file, dir, d.message);
  return base_.remove_dir_all(dir);
}

status fault_env::sync_file(const std::filesystem::path& path) {
  auto d = next(op::sync, path);
  if (d.v == verdict::fail) return injected(op::sync, path, d.message);
  return base_.sync_file(path);
}

}  // namespace baton::os
