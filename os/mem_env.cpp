#include "os/mem_env.h"

#include <iterator>

namespace baton::os {

namespace {
// True when `p` lies strictly inside folder `dir` (both keys).
bool is_under(const std::string& p, const std::string& dir) {
  if (dir == "/") return p.size() > 1 && p[0] == '/';
  return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && p[dir.size()] == '/';
}

error not_found(const std::string& what, const std::string& path) {
  return make_error(what + " " + path + ": No such file or directory");
}
}  // namespace

class mem_env::file final : public writable_file {
 public:
  file(mem_env& e, std::string path, std::shared_ptr<node> n, bool appending = false)
      : env_(e), path_(std::move(path)), node_(std::move(n)), appending_(appending) {}

  status append(std::string_view data) override {
    std::lock_guard lock(env_.mu_);
    if (closed_) return make_error("write " + path_ + ": file is closed");
    node_->data.append(data);
    written_ += data.size();
    ++node_->version;
    return {};
  }
  status write_at(std::uint64_t offset, std::string_view data) override {
    std::lock_guard lock(env_.mu_);
    if (closed_) return make_error("write " + path_ + ": file is closed");
    if (appending_) return make_error("write " + path_ + ": opened for appending");
    if (offset > written_ || data.size() > written_ - offset) {
      return make_error("write " + path_ + " at byte " + std::to_string(offset) + ": " +
                        std::to_string(data.size()) + " bytes run past the " +
                        std::to_string(written_) + " written");
    }
    node_->data.replace(static_cast<std::size_t>(offset), data.size(), data);
    ++node_->version;
    return {};
  }
  status sync() override {
    std::lock_guard lock(env_.mu_);
    if (closed_) return make_error("fsync " + path_ + ": file is closed");
    return {};
  }
  status close() override {
    std::lock_guard lock(env_.mu_);
    if (closed_) return make_error("close " + path_ + ": file is already closed");
    closed_ = true;
    return {};
  }

 private:
  mem_env& env_;
  std::string path_;
  std::shared_ptr<node> node_;
  bool appending_;
  std::uint64_t written_ = 0;  // guarded by env_.mu_
  bool closed_ = false;        // guarded by env_.mu_
};

mem_env::mem_env() { dirs_ = {"", "/", "."}; }

// Lexically normal, without a trailing separator, so "a/b/" and "a/./b" name the same folder.
std::string mem_env::key(const std::filesystem::path& p) {
  std::string s = p.lexically_normal().generic_string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool mem_env::dir_exists_locked(const std::string& dir) const { return dirs_.count(dir) != 0; }

std::shared_ptr<mem_env::node> mem_env::new_node_locked() {
  auto n = std::make_shared<node>();
  n->inode = next_inode_++;
  return n;
}

result<std::unique_ptr<writable_file>> mem_env::new_writable_file(
    const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  if (!dir_exists_locked(key(std::filesystem::path(k).parent_path()))) return not_found("open", k);
  if (dirs_.count(k)) return make_error("open " + k + ": Is a directory");
  auto n = new_node_locked();
  files_[k] = n;  // truncates: an old writer keeps its own (now unlinked) node
  return std::unique_ptr<writable_file>(new file(*this, k, std::move(n)));
}

result<std::unique_ptr<writable_file>> mem_env::new_appendable_file(
    const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  if (!dir_exists_locked(key(std::filesystem::path(k).parent_path()))) return not_found("open", k);
  if (dirs_.count(k)) return make_error("open " + k + ": Is a directory");
  auto& n = files_[k];
  if (!n) n = new_node_locked();
  return std::unique_ptr<writable_file>(new file(*this, k, n, true));
}

result<std::string> mem_env::read_file(const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  auto it = files_.find(k);
  if (it == files_.end()) return not_found("open", k);
  return it->second->data;
}

status mem_env::rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  const std::string f = key(from), t = key(to);
  std::lock_guard lock(mu_);
  if (dirs_.count(f) && f != t) {
    // A folder moves with everything in it; like rename(2), onto a missing name only.
    if (!dir_exists_locked(key(std::filesystem::path(t).parent_path()))) {
      return not_found("rename " + f + " to", t);
    }
    if (files_.count(t) || dirs_.count(t) || is_under(t, f)) {
      return make_error("rename " + f + " to " + t + ": Directory not empty or invalid target");
    }
    const auto moved = [&](const std::string& p) { return t + p.substr(f.size()); };
    std::set<std::string> dirs;
    for (const auto& d : dirs_) dirs.insert(d == f || is_under(d, f) ? moved(d) : d);
    std::map<std::string, std::shared_ptr<node>> files;
    for (auto& [p, n] : files_) files[is_under(p, f) ? moved(p) : p] = n;
    dirs_ = std::move(dirs);
    files_ = std::move(files);
    return {};
  }
  auto it = files_.find(f);
  if (it == files_.end()) return not_found("rename " + f + " to", t);
  if (!dir_exists_locked(key(std::filesystem::path(t).parent_path()))) {
    return not_found("rename " + f + " to", t);
  }
  if (dirs_.count(t)) return make_error("rename " + f + " to " + t + ": Is a directory");
  auto n = it->second;
  files_.erase(it);
  files_[t] = std::move(n);
  return {};
}

status mem_env::remove_file(const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  if (files_.erase(k) == 0) return not_found("remove", k);
  return {};
}

status mem_env::sync_dir(const std::filesystem::path& dir) {
  const std::string k = key(dir);
  std::lock_guard lock(mu_);
  if (!dir_exists_locked(k)) return not_found("open folder", k);
  return {};
}

status mem_env::create_dirs(const std::filesystem::path& dir) {
  std::lock_guard lock(mu_);
  for (std::filesystem::path p = key(dir); !p.empty(); p = p.parent_path()) {
    const std::string k = key(p);
    if (files_.count(k)) return make_error("create folder " + key(dir) + ": " + k + " is a file");
    dirs_.insert(k);
    if (p == p.parent_path()) break;  // root
  }
  return {};
}

bool mem_env::file_exists(const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  return files_.count(k) != 0 || dirs_.count(k) != 0;
}

result<std::vector<std::string>> mem_env::list_dir(const std::filesystem::path& dir) {
  const std::string k = key(dir);
  std::lock_guard lock(mu_);
  if (!dir_exists_locked(k)) return not_found("list folder", k);
  std::set<std::string> names;  // sorted, as env promises
  const auto child_name = [&](const std::string& p) -> std::string {
    const std::filesystem::path fp(p);
    return key(fp.parent_path()) == k && p != k ? fp.filename().string() : std::string();
  };
  for (const auto& [p, _] : files_) {
    if (auto n = child_name(p); !n.empty()) names.insert(n);
  }
  for (const auto& p : dirs_) {
    if (auto n = child_name(p); !n.empty()) names.insert(n);
  }
  return std::vector<std::string>(names.begin(), names.end());
}

status mem_env::remove_dir_all(const std::filesystem::path& dir) {
  const std::string k = key(dir);
  std::lock_guard lock(mu_);
  // As std::filesystem::remove_all: a missing path is no error, a file is removed alone.
  files_.erase(k);
  if (dirs_.erase(k) == 0) return {};
  for (auto it = files_.begin(); it != files_.end();) {
    it = is_under(it->first, k) ? files_.erase(it) : std::next(it);
  }
  for (auto it = dirs_.begin(); it != dirs_.end();) {
    it = is_under(*it, k) ? dirs_.erase(it) : std::next(it);
  }
  return {};
}

result<entry_info> mem_env::stat_no_follow(const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  entry_info info;
  if (auto it = files_.find(k); it != files_.end()) {
    info.kind = entry_kind::regular;
    info.size = it->second->data.size();
    info.identity = file_identity{0, it->second->inode, it->second->version, it->second->version};
  } else if (dirs_.count(k)) {
    info.kind = entry_kind::directory;
  }
  return info;
}

status mem_env::sync_file(const std::filesystem::path& path) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  if (!files_.count(k)) return not_found("open", k);
  return {};
}

status mem_env::put(const std::filesystem::path& path, std::string data) {
  const std::string k = key(path);
  std::lock_guard lock(mu_);
  if (!dir_exists_locked(key(std::filesystem::path(k).parent_path()))) return not_found("open", k);
  auto n = new_node_locked();
  n->data = std::move(data);
  files_[k] = std::move(n);
  return {};
}

std::map<std::string, std::string> mem_env::files() const {
  std::lock_guard lock(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [p, n] : files_) out.emplace(p, n->data);
  return out;
}

}  // namespace baton::os
