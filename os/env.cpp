#include "os/env.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
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

}  // namespace

error short_read_error(std::uint64_t offset, std::size_t wanted, std::uint64_t got_to) {
  return make_error("file ended at byte " + std::to_string(got_to) + ", reading " +
                    std::to_string(wanted) + " bytes at " + std::to_string(offset));
}

status readable_file::read_into(std::uint64_t offset, std::span<char> out) {
  // Bounded pieces: the staging buffer never grows past one, whatever `out`'s size.
  constexpr std::size_t piece = 1 << 20;
  std::string buf;
  for (std::size_t done = 0; done < out.size();) {
    const std::size_t n = std::min(piece, out.size() - done);
    if (auto s = read(offset + done, n, buf); !s) return s;
    std::memcpy(out.data() + done, buf.data(), std::min(n, buf.size()));
    if (buf.size() < n) return short_read_error(offset, out.size(), offset + done + buf.size());
    done += n;
  }
  return {};
}

namespace {

class whole_readable_file final : public readable_file {
 public:
  explicit whole_readable_file(std::string data) : data_(std::move(data)) {}
  std::uint64_t size() const override { return data_.size(); }
  status read_into(std::uint64_t offset, std::span<char> out) override {
    if (offset > data_.size() || out.size() > data_.size() - offset) {
      return short_read_error(offset, out.size(), data_.size());
    }
    std::memcpy(out.data(), data_.data() + offset, out.size());
    return {};
  }
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

// A file of an env without handles of its own (new_readable_file reads it at once), with the
// identity stat_no_follow gave both before and after that read: the identity of what was read.
class identified_file final : public readable_file {
 public:
  identified_file(std::unique_ptr<readable_file> inner, std::optional<file_identity> identity)
      : inner_(std::move(inner)), identity_(identity) {}
  std::uint64_t size() const override { return inner_->size(); }
  status read(std::uint64_t offset, std::size_t n, std::string& out) override {
    return inner_->read(offset, n, out);
  }
  status read_into(std::uint64_t offset, std::span<char> out) override {
    return inner_->read_into(offset, out);
  }
  std::optional<file_identity> identity() const override { return identity_; }

 private:
  std::unique_ptr<readable_file> inner_;
  std::optional<file_identity> identity_;
};

}  // namespace

result<std::unique_ptr<readable_file>> env::new_readable_file(const std::filesystem::path& path) {
  auto data = read_file(path);
  if (!data) return data.error();
  return std::unique_ptr<readable_file>(new whole_readable_file(std::move(*data)));
}

std::string describe_untrusted_size(std::uint64_t size, std::uint64_t max_bytes) {
  return std::to_string(size) + " bytes, larger than the cap of " + std::to_string(max_bytes) +
         " bytes for a checkpoint";
}

result<std::unique_ptr<readable_file>> env::new_untrusted_readable_file(
    const std::filesystem::path& path, const untrusted_file_limits& limits) {
  const std::string what = path.string();
  if (!limits.within.empty()) {
    // No links in this env: the lexical path is the resolved one.
    const auto rel = path.lexically_normal().lexically_relative(limits.within.lexically_normal());
    if (rel.empty() || rel.is_absolute() || *rel.begin() == "..") {
      return make_error(what + ": outside " + limits.within.string());
    }
  }
  auto info = stat_no_follow(path);
  if (!info) return info.error();
  switch (info->kind) {
    case entry_kind::regular:
      break;
    case entry_kind::missing:
      return make_error(what + ": does not exist");
    case entry_kind::symlink:
      return make_error(what + ": a symlink, not a regular file (links are not followed)");
    case entry_kind::directory:
      return make_error(what + ": a folder, not a regular file");
    case entry_kind::other:
      return make_error(what + ": a special file (FIFO, socket or device), not a regular file");
  }
  if (info->size > limits.max_bytes) {
    return make_error(what + ": " + describe_untrusted_size(info->size, limits.max_bytes));
  }
  auto f = new_readable_file(path);
  if (!f) return f.error();
  if ((*f)->size() > limits.max_bytes) {
    return make_error(what + ": " + describe_untrusted_size((*f)->size(), limits.max_bytes));
  }
  std::optional<file_identity> identity;
  if (auto again = stat_no_follow(path);
      again && info->identity && again->identity == info->identity) {
    identity = info->identity;
  }
  return std::unique_ptr<readable_file>(new identified_file(std::move(*f), identity));
}

status write_file_atomic(env& e, const std::filesystem::path& path, std::string_view data) {
  return write_file_atomic(e, path, [data](writable_file& f) { return f.append(data); });
}

status write_file_atomic(env& e, const std::filesystem::path& path,
                         const std::function<status(writable_file&)>& write) {
  return write_file_atomic(e, path, write, {});
}

status write_file_atomic(env& e, const std::filesystem::path& path,
                         const std::function<status(writable_file&)>& write,
                         const std::filesystem::path& reuse) {
  const std::filesystem::path tmp = path.string() + temp_suffix();
  const auto fail = [&](const error& err) -> status {
    (void)e.remove_file(tmp);  // best effort: the temp file is garbage either way
    return with_context("writing " + path.string(), err);
  };
  const bool reusing = !reuse.empty() && e.rename_file(reuse, tmp);
  auto file = reusing ? e.reuse_writable_file(tmp) : e.new_writable_file(tmp);
  if (!file) return fail(file.error());
  if (auto s = write(**file); !s) return fail(s.error());
  if (reusing) {
    if (auto s = (*file)->truncate_to_written(); !s) return fail(s.error());
  }
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

result<int> remove_temp_files(env& e, const std::filesystem::path& dir) {
  if (!e.file_exists(dir)) return 0;
  auto names = e.list_dir(dir);
  if (!names) return names.error();
  int removed = 0;
  for (const auto& n : *names) {
    if (n.find(temp_file_marker) == std::string::npos) continue;
    const auto p = dir / n;
    auto info = e.stat_no_follow(p);
    if (!info) return info.error();
    if (info->kind == entry_kind::directory) continue;
    if (auto s = e.remove_file(p); !s) return s.error();
    ++removed;
  }
  return removed;
}

}  // namespace baton::os
