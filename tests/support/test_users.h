// Users made for a test that must run something as someone else (system mode, the per-user
// unit): real accounts from useradd (-M, no home; a unique name per test process, removed with
// the test_user), or, on a host without useradd, an id no account uses (the kernel takes any
// uid, and baton never needs a passwd entry). Also runs `baton` as such a user, through
// os::spawn's credentials, as a login of that user would (primary group, supplementary groups).
// Linux only, and only as root: the caller skips otherwise.
#pragma once

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "os/process.h"
#include "support/run_process.h"

namespace baton::test {

// Runs argv (no shell) to completion and returns its exit code (-1: did not start, or did not
// finish in `limit`).
inline int run_program(const std::vector<std::string>& argv,
                       std::chrono::seconds limit = std::chrono::seconds(30)) {
  try {
    return exit_code_of(run_process(argv, {}, {}, limit));
  } catch (const std::exception&) {
    return -1;
  }
}

inline bool have_useradd() { return std::filesystem::exists("/usr/sbin/useradd"); }

// A group for the control socket; removed when it goes. Without groupadd: `nogroup`, which
// exists on Debian and which nothing else gives access to.
class test_group {
 public:
  explicit test_group(const std::string& tag) {
    if (have_useradd() && std::filesystem::exists("/usr/sbin/groupadd")) {
      name_ = "bt" + std::to_string(::getpid()) + tag;
      REQUIRE(run_program({"/usr/sbin/groupadd", name_}) == 0);
      made_ = true;
    } else {
      name_ = "nogroup";
    }
    const group* g = ::getgrnam(name_.c_str());
    REQUIRE(g != nullptr);
    gid_ = g->gr_gid;
  }
  ~test_group() {
    if (made_) (void)run_program({"/usr/sbin/groupdel", name_});
  }
  test_group(const test_group&) = delete;
  test_group& operator=(const test_group&) = delete;
  const std::string& name() const { return name_; }
  std::uint32_t gid() const { return gid_; }

 private:
  std::string name_;
  std::uint32_t gid_ = 0;
  bool made_ = false;
};

class test_user {
 public:
  // `tag` makes the name unique within the test; `fallback_uid` is used without useradd.
  test_user(const std::string& tag, std::uint32_t fallback_uid,
            std::optional<std::uint32_t> extra_group = std::nullopt,
            const std::string& extra_group_name = {}) {
    if (have_useradd()) {
      name_ = "bt" + std::to_string(::getpid()) + tag;
      std::vector<std::string> argv = {"/usr/sbin/useradd", "-M", "-U", "-s", "/usr/sbin/nologin"};
      if (!extra_group_name.empty()) {
        argv.push_back("-G");
        argv.push_back(extra_group_name);
      }
      argv.push_back(name_);
      REQUIRE(run_program(argv) == 0);
      made_ = true;
      const passwd* p = ::getpwnam(name_.c_str());
      REQUIRE(p != nullptr);
      creds_.uid = p->pw_uid;
      creds_.gid = p->pw_gid;
    } else {
      REQUIRE(::getpwuid(fallback_uid) == nullptr);
      creds_.uid = fallback_uid;
      creds_.gid = fallback_uid;
    }
    if (extra_group) creds_.groups.push_back(*extra_group);
  }
  ~test_user() {
    if (made_) (void)run_program({"/usr/sbin/userdel", name_});
  }
  test_user(const test_user&) = delete;
  test_user& operator=(const test_user&) = delete;

  std::uint32_t uid() const { return creds_.uid; }
  std::uint32_t gid() const { return creds_.gid; }
  const baton::os::process_credentials& credentials() const { return creds_; }

 private:
  std::string name_;
  baton::os::process_credentials creds_;
  bool made_ = false;
};

struct user_outcome {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `baton args...` as `user` (argv, no shell) to completion. stderr is collected through the
// pipe, so nothing of the user's needs to be writable.
inline user_outcome run_baton_as(const baton::os::process_credentials& user,
                                 const std::vector<std::string>& args,
                                 std::vector<std::pair<std::string, std::string>> env = {},
                                 std::chrono::seconds limit = std::chrono::seconds(60)) {
  baton::os::spawn_options o;
  o.argv = {BATON_EXE};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = std::move(env);
  o.credentials = user;
  user_outcome r;
  o.on_stderr = [&r](const boost::system::error_code& ec, std::string_view data) {
    if (!ec) r.err += data;
  };
  const auto ran = run_spawned(std::move(o), limit);
  r.code = exit_code_of(ran);
  r.out = ran.out;
  return r;
}

}  // namespace baton::test
