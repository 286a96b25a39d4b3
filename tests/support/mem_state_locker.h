// A state_locker for tests on a mem_env (os/state_lock.h): locks are entries in a table keyed by
// the state directory, held by this process's pid, so two daemons (or a daemon and `baton run`)
// built on one mem_env contend exactly as two processes do on a real lock file. The test owns it;
// it must outlive every lock it hands out.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "os/state_lock.h"
#include "os/system.h"

namespace baton::test {

class mem_state_locker final : public os::state_locker {
 public:
  boost::system::result<std::unique_ptr<os::state_lock>, os::lock_refusal> lock(
      const std::filesystem::path& dir, std::string_view role) override {
    std::lock_guard g(mu_);
    const auto file = dir / os::state_lock_file_name;
    const auto key = file.generic_string();
    if (const auto it = held_.find(key); it != held_.end()) {
      return os::lock_refusal{make_error(os::held_message(dir, file, it->second)), true,
                              it->second};
    }
    held_[key] = os::lock_holder{os::current_pid(), std::string(role)};
    return std::unique_ptr<os::state_lock>(std::make_unique<held>(*this, key, file));
  }

  bool is_held(const std::filesystem::path& dir) {
    std::lock_guard g(mu_);
    return held_.count((dir / os::state_lock_file_name).generic_string()) != 0;
  }

 private:
  class held final : public os::state_lock {
   public:
    held(mem_state_locker& owner, std::string key, std::filesystem::path path)
        : owner_(owner), key_(std::move(key)), path_(std::move(path)) {}
    ~held() override {
      std::lock_guard g(owner_.mu_);
      owner_.held_.erase(key_);
    }
    const std::filesystem::path& path() const override { return path_; }

   private:
    mem_state_locker& owner_;
    std::string key_;
    std::filesystem::path path_;
  };

  std::mutex mu_;
  std::map<std::string, os::lock_holder> held_;
};

}  // namespace baton::test
