#include "protocol/checkpoint_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>

#include "protocol/checkpoint_folder.h"

namespace baton::protocol {

namespace {

constexpr std::string_view prefix = "ckpt-";
constexpr std::string_view suffix = ".safetensors";
constexpr std::string_view temp_marker = os::temp_file_marker;

// Step encoded in a checkpoint name: "ckpt-<12+ digits>.safetensors" (a file) or
// "ckpt-<12+ digits>" (a folder); nullopt for anything else (temp files and staging included).
std::optional<std::int64_t> step_of(std::string_view name, bool& is_folder) {
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  is_folder = !(name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix);
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - (is_folder ? 0 : suffix.size()));
  if (digits.size() < 12) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::int64_t step = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || p != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::optional<std::int64_t> step_of(std::string_view name) {
  bool is_folder = false;
  auto s = step_of(name, is_folder);
  if (!s || is_folder) return std::nullopt;
  return s;
}

// Step of the checkpoint a temp file was going to become ("ckpt-...safetensors.tmp-...").
std::optional<std::int64_t> temp_step_of(std::string_view name) {
  const auto at = name.find(temp_marker);
  if (at == std::string_view::npos) return std::nullopt;
  return step_of(name.substr(0, at));
}

}  // namespace

checkpoint_store::checkpoint_store(os::env& e, std::filesystem::path dir, int keep)
    : env_(e), dir_(std::move(dir)), keep_(std::max(keep, 1)) {}

std::filesystem::path checkpoint_store::path_for_step(std::int64_t step) const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld.safetensors", static_cast<long long>(step));
  return dir_ / buf;
}

result<std::vector<checkpoint_store::entry>> checkpoint_store::entries() const {
  if (!env_.file_exists(dir_)) return std::vector<entry>{};
  auto names = env_.list_dir(dir_);
  if (!names) return names.error();
  std::vector<entry> found;
  for (const auto& n : *names) {
    bool is_folder = false;
    if (auto s = step_of(n, is_folder)) found.push_back({*s, dir_ / n, is_folder});
  }
  // By step, not by name: a step past 12 digits still sorts after the others.
  std::sort(found.begin(), found.end(), [](const entry& a, const entry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return found;
}

result<std::vector<std::filesystem::path>> checkpoint_store::list() const {
  auto found = entries();
  if (!found) return found.error();
  std::vector<std::filesystem::path> out;
  out.reserve(found->size());
  for (auto& f : *found) out.push_back(std::move(f.path));
  return out;
}

status checkpoint_store::prune(const std::filesystem::path& keep_path) const {
  auto found = entries();
  if (!found) return found.error();
  std::vector<entry> others;
  for (auto& f : *found) {
    if (f.path != keep_path) others.push_back(std::move(f));
  }
  const std::size_t keep_others = static_cast<std::size_t>(keep_ - 1);
  if (others.size() <= keep_others) return {};
  bool spare = env_.file_exists(spare_path());
  for (std::size_t i = 0; i < others.size() - keep_others; ++i) {
    const auto& o = others[i];
    if (!o.is_folder && !spare) {
      // Out of the checkpoints at once (one rename), and written over by the next save.
      if (env_.rename_file(o.path, spare_path())) {
        spare = true;
        continue;
      }
    }
    // A name of the folder kind may still be a plain file (a damaged leftover): remove_dir_all
    // takes either.
    auto s = o.is_folder ? env_.remove_dir_all(o.path) : env_.remove_file(o.path);
    if (!s) return s;
  }
  return {};
}

bool still_verified(const verified_file& known, const std::vector<std::string>& names,
                    const result<os::entry_info>& now) {
  const std::string own = known.path.filename().string();
  bool listed = false;
  for (const auto& n : names) {
    bool is_folder = false;
    const auto step = step_of(n, is_folder);
    if (!step) continue;
    if (n == own) {
      listed = *step == known.step && !is_folder;
      continue;
    }
    // The walk goes newest first, by step and then by name: anything that sorts after the file
    // would be read before it.
    if (*step > known.step || (*step == known.step && n > own)) return false;
  }
  if (!listed || !now || now->kind != os::entry_kind::regular || !now->identity) return false;
  return now->size == known.size && *now->identity == known.identity;
}

result<verified_checkpoint> checkpoint_store::newest_verified(
    const verify_options& options, const std::optional<verified_file>& known) const {
  if (known && known->path.parent_path() == dir_.lexically_normal()) {
    auto names = env_.list_dir(dir_);
    if (names && still_verified(*known, *names, env_.stat_no_follow(known->path))) {
      verified_checkpoint out;
      out.path = dir_ / known->path.filename();  // as the walk names it
      out.step = known->step;
      return out;
    }
  }
  return newest_verified(options);
}

result<verified_checkpoint> checkpoint_store::newest_verified(const verify_options& options) const {
  auto found = entries();
  if (!found) return with_context("finding a checkpoint in " + dir_.string(), found.error());
  verified_checkpoint out;
  const auto reject = [&](const std::filesystem::path& p, const std::string& why) {
    if (!options.move_rejected) {
      out.rejected.push_back(why);
      return;
    }
    auto moved = move_aside(p, why);
    out.rejected.push_back(why +
                           (moved ? " (moved to " + moved->string() + ")"
                                  : " (could not move it aside: " + moved.error().message + ")"));
  };
  for (auto it = found->rbegin(); it != found->rend(); ++it) {
    const std::string what = it->path.string();
    if (it->is_folder) {
      auto m = verify_checkpoint_folder(env_, it->path, options.max_bytes);
      if (!m) {
        reject(it->path, m.error().message);  // names the file already
        continue;
      }
    } else {
      auto file = env_.new_untrusted_readable_file(it->path, {options.max_bytes, dir_});
      if (!file) {
        reject(it->path, file.error().message);  // names the file already
        continue;
      }
      auto sum = checkpoint_summary_streamed(
          [&](std::uint64_t offset, std::size_t n, std::string& buf) {
            return (*file)->read(offset, n, buf);
          },
          (*file)->size(), what, folder_hash_chunk_bytes);
      file->reset();
      if (!sum) {
        reject(it->path, sum.error().message);
        continue;
      }
      if (sum->step != it->step) {
        reject(it->path, what + ": file name says step " + std::to_string(it->step) +
                             " but its metadata says step " + std::to_string(sum->step));
        continue;
      }
    }
    out.path = it->path;
    out.step = it->step;
    out.is_folder = it->is_folder;
    return out;
  }
  return out;
}

result<std::filesystem::path> checkpoint_store::move_aside(const std::filesystem::path& entry,
                                                           const std::string& reason) const {
  const auto rejected = dir_ / rejected_dir_name;
  if (auto s = env_.create_dirs(rejected); !s) return s.error();
  const std::string name = entry.filename().string();
  auto to = rejected / name;
  for (int n = 1; n < 1000; ++n) {
    auto there = env_.stat_no_follow(to);
    if (!there) return there.error();
    if (there->kind == os::entry_kind::missing) break;
    to = rejected / (name + "." + std::to_string(n));
  }
  if (auto s = env_.rename_file(entry, to); !s) return s.error();
  // The reason is for the user; the move is what matters, so a failed note does not undo it.
  (void)os::write_file_atomic(env_, to.string() + ".reason", reason + "\n");
  (void)env_.sync_dir(dir_);
  return to;
}

result<int> checkpoint_store::sweep_temp_files() const { return os::remove_temp_files(env_, dir_); }

result<saved_checkpoint> checkpoint_store::save(const checkpoint& c) { return save(view_of(c)); }

result<saved_checkpoint> checkpoint_store::save(const checkpoint_view& c) {
  const std::int64_t step = c.step();
  // Validate before touching the folder, so a bad checkpoint leaves no temp file behind.
  auto header = unsealed_checkpoint_header(c);
  if (!header) return with_context("checkpoint for step " + std::to_string(step), header.error());
  if (auto s = env_.create_dirs(dir_); !s) return s.error();
  const auto path = path_for_step(step);

  status written;
  std::string digest;
  try {
    const auto spare = spare_path();
    written = os::write_file_atomic(
        env_, path,
        [&](os::writable_file& f) -> status {
          auto d = write_checkpoint_streamed(
              c, *header, [&](std::string_view piece) { return f.append(piece); },
              [&](std::uint64_t offset, std::string_view digits) {
                return f.write_at(offset, digits);
              },
              256 << 10, both_ ? &both_ : nullptr);
          if (!d) return d.error();
          digest = std::move(*d);
          return {};
        },
        env_.file_exists(spare) ? spare : std::filesystem::path());
  } catch (const std::exception& ex) {
    // os::write_file_atomic cleans up after failures it returns, not after a throwing env (a test
    // env, or bad_alloc); remove the temp file it left so nothing half-written stays behind.
    written = make_error("writing " + path.string() + ": " + ex.what());
    if (auto names = env_.list_dir(dir_)) {
      const std::string stem = path.filename().string() + std::string(temp_marker);
      for (const auto& n : *names) {
        if (n.rfind(stem, 0) == 0) (void)env_.remove_file(dir_ / n);  // best effort, as above
      }
    }
  }
  if (!written) return written.error();

  // Prune only after a durable save, and never the file just written (even if its step is
  // older than files already here, e.g. after a job was rewound).
  if (auto s = prune(path); !s) {
    return with_context("saved " + path.string() + " but pruning failed", s.error(),
                        errc::saved_but_cleanup_failed);
  }
  // Temp files for older steps can only be leftovers of a crashed writer: this one is newer.
  if (auto names = env_.list_dir(dir_)) {
    for (const auto& n : *names) {
      if (auto s = temp_step_of(n); s && *s < step) {
        if (auto r = env_.remove_file(dir_ / n); !r) {
          return with_context("saved " + path.string() + " but removing a stale temp file failed",
                              r.error(), errc::saved_but_cleanup_failed);
        }
      }
    }
  }
  return saved_checkpoint{path, std::move(digest)};
}

result<std::string> checkpoint_store::verify(const std::filesystem::path& path) const {
  auto file = env_.new_readable_file(path);
  if (!file) return file.error();
  return checkpoint_digest_streamed([&](std::uint64_t offset, std::size_t n,
                                        std::string& out) { return (*file)->read(offset, n, out); },
                                    (*file)->size(), path.string());
}

result<std::optional<loaded_checkpoint>> checkpoint_store::load_newest() const {
  auto f = load_newest_file();
  if (!f) return f.error();
  if (!*f) return std::optional<loaded_checkpoint>{};
  loaded_checkpoint out{std::move((*f)->path), {}, std::move((*f)->rejected)};
  out.data.metadata = std::move((*f)->data.metadata);
  out.data.tensors.reserve((*f)->data.tensors.size());
  for (auto& v : (*f)->data.tensors) {
    tensor t;
    t.name = std::move(v.name);
    t.type = v.type;
    t.shape = std::move(v.shape);
    t.bytes.assign(v.bytes.data(), v.bytes.size());
    out.data.tensors.push_back(std::move(t));
  }
  return std::optional<loaded_checkpoint>(std::move(out));
}

result<std::optional<opened_checkpoint>> checkpoint_store::open_newest(
    std::size_t chunk_bytes, digest_check check,
    const std::vector<std::filesystem::path>& skip) const {
  auto found = entries();
  if (!found) return with_context("loading a checkpoint from " + dir_.string(), found.error());
  std::vector<std::filesystem::path> files;
  for (auto& f : *found) {
    if (!f.is_folder) files.push_back(std::move(f.path));
  }
  if (files.empty()) return std::optional<opened_checkpoint>{};
  std::vector<std::string> rejected;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (std::find(skip.begin(), skip.end(), *it) != skip.end()) continue;
    const std::string what = it->string();
    auto file = env_.new_readable_file(*it);
    if (!file) {
      rejected.push_back(what + ": " + file.error().message);
      continue;
    }
    auto index =
        index_checkpoint_streamed([&](std::uint64_t offset, std::size_t n,
                                      std::string& out) { return (*file)->read(offset, n, out); },
                                  (*file)->size(), what, chunk_bytes, check);
    if (!index) {
      rejected.push_back(index.error().message);  // already starts with the path
      continue;
    }
    const auto named = step_of(it->filename().string());
    if (named && *named != index->step()) {
      rejected.push_back(what + ": file name says step " + std::to_string(*named) +
                         " but its metadata says step " + std::to_string(index->step()));
      continue;
    }
    return std::optional<opened_checkpoint>(
        opened_checkpoint{*it, std::move(*file), std::move(*index), std::move(rejected)});
  }
  std::string msg = "no valid checkpoint in " + dir_.string() + " (" +
                    std::to_string(files.size()) + " files, all rejected)";
  for (const auto& r : rejected) msg += "; " + r;
  return make_error(msg);
}

result<std::optional<loaded_checkpoint_file>> checkpoint_store::load_newest_file() const {
  auto found = entries();
  if (!found) return with_context("loading a checkpoint from " + dir_.string(), found.error());
  std::vector<std::filesystem::path> files_only;
  for (auto& f : *found) {
    if (!f.is_folder) files_only.push_back(std::move(f.path));
  }
  const auto* files = &files_only;
  if (files->empty()) return std::optional<loaded_checkpoint_file>{};
  std::vector<std::string> rejected;
  for (auto it = files->rbegin(); it != files->rend(); ++it) {
    const std::string what = it->string();
    auto bytes = env_.read_file(*it);
    if (!bytes) {
      rejected.push_back(what + ": " + bytes.error().message);
      continue;
    }
    auto owned = std::make_unique<const std::string>(std::move(*bytes));
    auto c = decode_checkpoint_view(*owned, what);
    if (!c) {
      rejected.push_back(c.error().message);  // already starts with the path
      continue;
    }
    const auto named = step_of(it->filename().string());
    if (named && *named != c->step()) {
      rejected.push_back(what + ": file name says step " + std::to_string(*named) +
                         " but its metadata says step " + std::to_string(c->step()));
      continue;
    }
    return std::optional<loaded_checkpoint_file>(
        loaded_checkpoint_file{*it, std::move(owned), std::move(*c), std::move(rejected)});
  }
  std::string msg = "no valid checkpoint in " + dir_.string() + " (" +
                    std::to_string(files->size()) + " files, all rejected)";
  for (const auto& r : rejected) msg += "; " + r;
  return make_error(msg);
}

}  // namespace baton::protocol
