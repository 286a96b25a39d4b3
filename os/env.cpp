#include "os/env.h"

#include <atomic>
#include <cstdio>
#include <random>

namespace baton::os {

namespace {

// Unique per process and call, so two writers of different files in one folder never collide
// and a stale temp file left by a crash is never reused half-written.
std::string temp_suffix() {
  static const std::uint64_t process_tag = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  static std::atomic<std::uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, ".tmp-%016llx-%llu", static_cast<unsigned long long>(process_tag),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

class whole_readable_file final : public readable_file {
 public:
  explicit whole_readable_file(std::string data) : data_(std::move(data)) {}
  std::uint64_t size() const override { return data_.size(); }
  status read(std::uint64_t offset, std::size_t n, std::string& out) override {
    if (offset >= data_.size()) {
      out.clear();
    } else {
      out.assign(data_, static_cast<std::size_t>(offset), n);
    }
    return {};
  }

 private:
  std::string data_;
};

}  // namespace

result<std::unique_ptr<readable_file>> env::new_readable_file(const std::filesystem::path& path) {
  auto data = read_file(path);
  if (!data) return data.error();
  return std::unique_ptr<readable_file>(new whole_readable_file(std::move(*data)));
}

status write_file_atomic(env& e, const std::filesystem::path& path, std::string_view data) {
  return write_file_atomic(e, path, [data](writable_file& f) { return f.append(data); });
}

status write_file_atomic(env& e, const std::filesystem::path& path,
                         const std::function<status(writable_file&)>& write) {
  const std::filesystem::path tmp = path.string() + temp_suffix();
  const auto fail = [&](const error& err) -> status {
    (void)e.remove_file(tmp);  // best effort: the temp file is garbage either way
    return with_context("writing " + path.string(), err);
  };
  auto file = e.new_writable_file(tmp);
  if (!file) return fail(file.error());
  if (auto s = write(**file); !s) return fail(s.error());
  if (auto s = (*file)->sync(); !s) return fail(s.error());
  if (auto s = (*file)->close(); !s) return fail(s.error());
  file->reset();
  if (auto s = e.rename_file(tmp, path); !s) return fail(s.error());
  // After the rename the new content is in place; a failed folder sync means it may not survive
  // a power cut, which the caller must hear about (it must not report the save as durable).
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (auto s = e.sync_dir(dir); !s) return with_context("writing " + path.string(), s.error());
  return {};
}

}  // namespace baton::os
