// An env that keeps files in memory, for tests: no disk, no leftovers, and it can be inspected
// and wrapped (see fault_env.h). Files behave like POSIX inodes: a writable file keeps writing to
// the same content after its path is renamed or removed. Thread-safe; one mutex guards all state.
// Durability is not modelled: sync() only checks the file is open. Folders rename as a whole (all
// they hold moves with them); there are no symlinks or special files. stat_no_follow gives each
// file an identity: a new inode number per created file, and a version counted up on every write
// as both of its times.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "os/env.h"

namespace baton::os {

class mem_env : public env {
 public:
  mem_env();

  result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) override;
  result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) override;
  result<std::string> read_file(const std::filesystem::path& path) override;
  status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) override;
  status remove_file(const std::filesystem::path& path) override;
  status sync_dir(const std::filesystem::path& dir) override;
  status create_dirs(const std::filesystem::path& dir) override;
  bool file_exists(const std::filesystem::path& path) override;
  result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override;
  status remove_dir_all(const std::filesystem::path& dir) override;
  result<entry_info> stat_no_follow(const std::filesystem::path& path) override;
  status sync_file(const std::filesystem::path& path) override;

  // Test helpers: put bytes at a path directly (its folder must exist), and see every file.
  status put(const std::filesystem::path& path, std::string data);
  std::map<std::string, std::string> files() const;

 private:
  struct node {
    std::string data;
    std::uint64_t inode = 0;
    std::int64_t version = 0;  // writes so far
  };
  class file;
  static std::string key(const std::filesystem::path& p);
  bool dir_exists_locked(const std::string& dir) const;
  std::shared_ptr<node> new_node_locked();

  mutable std::mutex mu_;
  std::uint64_t next_inode_ = 1;
  std::map<std::string, std::shared_ptr<node>> files_;
  std::set<std::string> dirs_;
};

}  // namespace baton::os
