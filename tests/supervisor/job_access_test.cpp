// The access rules of supervisor/job_access.h, one by one: who sees and changes which job, which
// submits are refused, when the daemon may not start, and which identity a job's workers get.
#include "supervisor/job_access.h"

#include <catch2/catch.hpp>

using namespace baton::supervisor;

namespace {

job_record owned_by(std::uint32_t uid, std::uint32_t gid = 100) {
  job_record r;
  r.id = "mnist-1";
  r.owner = job_owner{uid, gid, {27, 44}};
  return r;
}

daemon_settings submitter_mode(bool allow_root = false) {
  daemon_settings s;
  s.run_as = jobs_run_as::submitter;
  s.allow_root_jobs = allow_root;
  return s;
}

}  // namespace

TEST_CASE("a job belongs to its recorded owner, an owner-less record to the daemon's uid",
          "[unit][job_access]") {
  CHECK(job_owner_uid(owned_by(1001), 0) == 1001);
  job_record old;  // written before records had owners
  CHECK(job_owner_uid(old, 0) == 0);
  CHECK(job_owner_uid(old, 1500) == 1500);
}

TEST_CASE(
    "an unprivileged caller reaches its own jobs only while root and the daemon's uid reach all",
    "[unit][job_access]") {
  CHECK(may_access(api_caller{1001, false}, 1001));
  CHECK_FALSE(may_access(api_caller{1002, false}, 1001));
  CHECK(may_access(api_caller{0, true}, 1001));
  CHECK(may_access(api_caller{1500, true}, 1001));
}

TEST_CASE("a refused per-job call says whose job it is and who asked", "[unit][job_access]") {
  CHECK_FALSE(check_job_access(api_caller{1001, false}, "mnist-1", 1001));
  const auto denied = check_job_access(api_caller{1002, false}, "mnist-1", 1001);
  REQUIRE(denied);
  CHECK(denied->status == 403);
  CHECK(denied->message == "job mnist-1 belongs to uid 1001; you are uid 1002");
}

TEST_CASE("in submitter mode a job submitted by root is refused unless allow_root_jobs",
          "[unit][job_access]") {
  const auto refused = check_submitter(submitter_mode(), 0);
  REQUIRE(refused);
  CHECK(refused->status == 403);
  CHECK(refused->message.find("allow_root_jobs") != std::string::npos);
  CHECK(refused->message.find("jobs_run_as") != std::string::npos);
  CHECK_FALSE(check_submitter(submitter_mode(), 1001));
  CHECK_FALSE(check_submitter(submitter_mode(true), 0));
  CHECK_FALSE(check_submitter(daemon_settings{}, 0));  // daemon mode: root's job runs as the daemon
}

TEST_CASE("submitter mode is refused at start unless the daemon is root on a POSIX host",
          "[unit][job_access]") {
  CHECK(check_run_as_setting(daemon_settings{}, 1000, true));
  CHECK(check_run_as_setting(submitter_mode(), 0, true));
  const auto not_root = check_run_as_setting(submitter_mode(), 1000, true);
  REQUIRE_FALSE(not_root);
  CHECK(not_root.error().message.find("jobs_run_as = \"submitter\" needs the daemon to run as "
                                      "root (it runs as uid 1000)") != std::string::npos);
  const auto windows = check_run_as_setting(submitter_mode(), 0, false);
  REQUIRE_FALSE(windows);
  CHECK(windows.error().message.find("jobs_run_as") != std::string::npos);
}

TEST_CASE("a root daemon in daemon mode with a socket group is refused unless allow_root_jobs",
          "[unit][job_access]") {
  daemon_settings s;                        // jobs_run_as = "daemon"
  CHECK(check_run_as_setting(s, 0, true));  // root's socket is root's alone: root's own jobs
  s.socket_group = "baton";
  CHECK(check_run_as_setting(s, 1000, true));  // members' jobs run as uid 1000, not root
  const auto as_root = check_run_as_setting(s, 0, true);
  REQUIRE_FALSE(as_root);
  CHECK(as_root.error().message ==
        "jobs_run_as = \"daemon\" with the daemon running as root would run the jobs of "
        "socket_group \"baton\"'s members as root: set jobs_run_as = \"submitter\" (each job "
        "runs as its submitter), or allow_root_jobs = true if that is meant");
  s.allow_root_jobs = true;
  CHECK(check_run_as_setting(s, 0, true));
  s.allow_root_jobs = false;
  CHECK(check_run_as_setting(s, 0, false));  // Windows: no socket group, no uids
}

TEST_CASE("workers run as the daemon in daemon mode and as the job's owner in submitter mode",
          "[unit][job_access]") {
  auto as_daemon = worker_credentials(daemon_settings{}, owned_by(1001), 0);
  REQUIRE(as_daemon);
  CHECK_FALSE(*as_daemon);

  auto as_owner = worker_credentials(submitter_mode(), owned_by(1001, 100), 0);
  REQUIRE(as_owner);
  REQUIRE(*as_owner);
  CHECK((*as_owner)->uid == 1001);
  CHECK((*as_owner)->gid == 100);
  CHECK((*as_owner)->groups == std::vector<std::uint32_t>{27, 44});
}

TEST_CASE("a job that would run as root in submitter mode is refused unless allow_root_jobs",
          "[unit][job_access]") {
  auto owned_by_root = worker_credentials(submitter_mode(), owned_by(0, 0), 0);
  REQUIRE_FALSE(owned_by_root);
  CHECK(owned_by_root.error().message.find("allow_root_jobs is false") != std::string::npos);

  job_record old;  // no owner: the daemon's, root
  old.id = "old-1";
  auto ownerless = worker_credentials(submitter_mode(), old, 0);
  REQUIRE_FALSE(ownerless);
  CHECK(ownerless.error().message.find("names no owner") != std::string::npos);

  auto allowed = worker_credentials(submitter_mode(true), owned_by(0, 0), 0);
  REQUIRE(allowed);
  REQUIRE(*allowed);
  CHECK((*allowed)->uid == 0);
}

TEST_CASE("a worker run as its submitter starts from their login's environment, not the daemon's",
          "[unit][job_access]") {
  auto r = owned_by(1001);
  r.owner->path = "/home/alice/.pyenv/shims:/usr/bin";
  const auto run_as = baton::os::process_credentials{1001, 100, {27, 44}};
  const baton::os::user_account alice{"alice", "/home/alice", "/bin/zsh"};
  CHECK(worker_login_env(r, run_as, 0, alice, "/var/lib/baton/jobs/mnist-1") ==
        env_entries{{"USER", "alice"},
                    {"LOGNAME", "alice"},
                    {"HOME", "/home/alice"},
                    {"SHELL", "/bin/zsh"},
                    {"PATH", "/home/alice/.pyenv/shims:/usr/bin"}});
  // A uid with no account (the kernel takes any): never root's HOME, and no PATH was sent.
  r.owner->path.reset();
  CHECK(worker_login_env(r, run_as, 0, std::nullopt, "/var/lib/baton/jobs/mnist-1") ==
        env_entries{{"USER", "1001"},
                    {"LOGNAME", "1001"},
                    {"HOME", "/var/lib/baton/jobs/mnist-1"},
                    {"SHELL", "/bin/sh"}});
}

TEST_CASE("a worker run as the daemon's user gets the submitter's PATH only from that same user",
          "[unit][job_access]") {
  auto r = owned_by(1001);
  r.owner->path = "/home/alice/bin:/usr/bin";
  // The per-user daemon: the submitter is the daemon's user, whose shell PATH the unit lacks.
  CHECK(worker_login_env(r, std::nullopt, 1001, std::nullopt, "/jobs/mnist-1") ==
        env_entries{{"PATH", "/home/alice/bin:/usr/bin"}});
  // A shared daemon running jobs as itself: a member's PATH may name what its user cannot run.
  CHECK(worker_login_env(r, std::nullopt, 999, std::nullopt, "/jobs/mnist-1").empty());
  job_record old;  // no owner, no PATH
  CHECK(worker_login_env(old, std::nullopt, 999, std::nullopt, "/jobs/x").empty());
}
