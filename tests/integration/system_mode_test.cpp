// System mode with real processes (issue 14): a daemon running as root with the packaged settings
// (jobs_run_as = "submitter"; a socket group both users belong to stands in for `baton`). Two
// users made for the test submit jobs through the socket; each worker reports its own uid, gid,
// groups and login environment (USER, HOME, the client's PATH, where a bare program name is
// looked up), each job folder must be its user's, and one user must get 403 on the other's job. A
// job submitted by root is refused, and a worker that tries to become root, or plants links
// where the daemon appends and removes, must get nowhere. Needs root (as in CI): skipped
// otherwise, since only root can start a worker as another user.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/daemon_process.h"
#include "support/run_process.h"
#include "support/skip.h"
#include "support/test_paths.h"
#include "support/test_users.h"

using namespace baton::test;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace system_mode_test {

const std::string worker_script =
    std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/identity_worker.py";

json identity_job(const std::string& name, const json& extra_params = json::object(),
                  const std::string& program = python()) {
  json params = {{"total_steps", 3}};
  params.update(extra_params);
  return {{"name", name},
          {"worker", {{"command", {program, worker_script}}}},
          {"shard", {{"steps", 10}}},
          {"memory", {{"poll_ms", 50}}},
          {"restart", {{"max_failures", 1}, {"backoff_initial_ms", 100}, {"backoff_max_ms", 100}}},
          {"params", params}};
}

// A job file anyone may read, in a folder anyone may enter (the users submit it themselves).
fs::path write_job(const fs::path& dir, const std::string& name, const json& doc) {
  const auto path = dir / (name + ".json");
  std::ofstream(path) << doc.dump(2);
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  return path;
}

struct stat_result {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  unsigned mode = 0;
};
stat_result lstat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return {st.st_uid, st.st_gid, static_cast<unsigned>(st.st_mode & 07777)};
}

TEST_CASE(
    "system mode: each job runs as its submitter, in a folder of its own, out of others' reach",
    "[integration][system_mode]") {
  if (::geteuid() != 0) {
    BATON_SKIP("system mode starts workers as other users, which needs root (CI runs as root)");
  }
  const auto top = fresh_scratch_dir("baton-system-mode");
  fs::permissions(top, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  test_group socket_group("s");
  test_user alice("a", 61001, socket_group.gid(), socket_group.name());
  test_user bob("b", 61002, socket_group.gid(), socket_group.name());

  // What only root may touch: a hostile worker aims its links at these.
  const auto secret = top / "secret";
  std::ofstream(secret) << "root only\n";
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  const auto secret_dir = top / "secret-dir";
  fs::create_directories(secret_dir);
  std::ofstream(secret_dir / "keep") << "keep\n";
  fs::permissions(secret_dir, fs::perms::owner_all);

  const auto jobs = top / "jobs";
  fs::create_directories(jobs);
  fs::permissions(jobs, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec |
                            fs::perms::group_read | fs::perms::group_exec);
  const auto daemon_dir = top / "daemon";
  fs::create_directories(daemon_dir);
  // The packaged settings, with the test's socket group for the package's `baton` group (the
  // command line gives the state folder and the socket, as the packaged unit's does).
  json packaged = json::parse(read_text(fs::path(BATON_SOURCE_DIR) / "deploy/settings.json"));
  REQUIRE(packaged.at("jobs_run_as") == "submitter");
  REQUIRE(packaged.at("socket_group") == "baton");
  packaged["socket_group"] = socket_group.name();
  const auto settings = daemon_dir / "settings.json";
  std::ofstream(settings) << packaged.dump();
  daemon_process d(daemon_dir, {"--settings", settings.string()});
  const auto sock = d.socket().string();
  const auto state = daemon_dir / "state" / "jobs";

  const auto submit_as = [&](const test_user& u, const std::string& file) {
    auto r = run_baton_as(u.credentials(), {"submit", file, "--socket", sock});
    INFO(r.err);
    REQUIRE(r.code == 0);
    return trim(r.out);
  };
  // Alice's python is on her PATH only (a ~/.local/bin or pyenv shim): her job names it bare.
  const auto alice_bin = top / "alice-bin";
  fs::create_directories(alice_bin);
  const std::string own_python = "baton-test-python-" + std::to_string(::getpid());
  fs::create_symlink(python(), alice_bin / own_python);
  const std::string test_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  const std::string alice_path = alice_bin.string() + ":" + test_path;
  auto alice_submit = run_baton_as(
      alice.credentials(),
      {"submit",
       write_job(jobs, "alice", identity_job("alice", json::object(), own_python)).string(),
       "--socket", sock},
      {{"PATH", alice_path}});
  INFO(alice_submit.err);
  REQUIRE(alice_submit.code == 0);
  const auto a = trim(alice_submit.out);
  const auto b = submit_as(bob, write_job(jobs, "bob", identity_job("bob")).string());
  // At rest: completed, failed or cancelled.
  const auto done = [](const json& s) {
    const auto st = s.at("state").get<std::string>();
    return st == "completed" || st == "failed" || st == "cancelled";
  };
  CHECK(d.poll(a, done, 30s).at("state") == "completed");
  CHECK(d.poll(b, done, 30s).at("state") == "completed");

  SECTION("each worker runs as its submitter, with its groups, and its folder is the user's") {
    for (const auto* u : {&alice, &bob}) {
      const auto id = u == &alice ? a : b;
      const json me = json::parse(read_text(state / id / "identity.json"));
      INFO(me.dump());
      CHECK(me.at("uid") == u->uid());
      CHECK(me.at("euid") == u->uid());
      // The bare name was looked up in alice's PATH, where root's finds nothing.
      if (u == &alice) CHECK(me.at("executable") == (alice_bin / own_python).string());
      CHECK(me.at("gid") == u->gid());
      CHECK(me.at("egid") == u->gid());
      auto groups = std::vector<std::uint32_t>{u->gid(), socket_group.gid()};
      std::sort(groups.begin(), groups.end());
      groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
      auto seen = me.at("groups").get<std::vector<std::uint32_t>>();
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      // The kernel may or may not list the primary group among the supplementary ones.
      std::erase(seen, u->gid());
      std::erase(groups, u->gid());
      CHECK(seen == groups);
      const auto folder = lstat_of(state / id);
      CHECK(folder.uid == u->uid());
      CHECK(folder.gid == u->gid());
      CHECK(folder.mode == 0700);
      CHECK(lstat_of(state / id / "checkpoints").uid == u->uid());
      // A login's environment, not root's: the account's names and home, the client's PATH.
      const auto& env = me.at("env");
      const passwd* pw = ::getpwuid(u->uid());
      const std::string name = pw ? pw->pw_name : std::to_string(u->uid());
      CHECK(env.at("USER") == name);
      CHECK(env.at("LOGNAME") == name);
      CHECK(env.at("HOME") == (pw ? std::string(pw->pw_dir) : (state / id).string()));
      CHECK(env.at("SHELL") == (pw && *pw->pw_shell ? std::string(pw->pw_shell) : "/bin/sh"));
      CHECK(env.at("PATH") == (u == &alice ? alice_path : test_path));
      CHECK(d.status(id).at("owner").at("path") == env.at("PATH"));
      // The daemon's own files stay the daemon's.
      CHECK(lstat_of(state / id / "record.0.json").uid == 0);
      CHECK(d.status(id).at("owner").at("uid") == u->uid());
    }
  }

  SECTION("one user gets 403 on the other's job, and lists only their own") {
    const std::string denied = "job " + a + " belongs to uid " + std::to_string(alice.uid()) +
                               "; you are uid " + std::to_string(bob.uid());
    const std::vector<std::vector<std::string>> verbs = {
        {"status", a}, {"logs", a}, {"cancel", a}, {"rm", a}};
    for (const auto& verb : verbs) {
      auto r = run_baton_as(bob.credentials(), [&] {
        auto args = verb;
        args.insert(args.end(), {"--socket", sock});
        return args;
      }());
      INFO(verb[0] << ": " << r.err);
      CHECK(r.code != 0);
      CHECK_THAT(r.err, Catch::Contains(denied));
    }
    auto list = run_baton_as(bob.credentials(), {"list", "--json", "--socket", sock});
    REQUIRE(list.code == 0);
    const json listed = json::parse(list.out);
    REQUIRE(listed.at("jobs").size() == 1);
    CHECK(listed["jobs"][0].at("id") == b);
    // Alice's job is still there, untouched by bob's rm.
    CHECK(d.status(a).at("state") == "completed");
    auto own = run_baton_as(alice.credentials(), {"status", a, "--socket", sock});
    CHECK(own.code == 0);
  }

  SECTION("a job submitted by root is refused, naming the setting") {
    auto r = run_baton(
        {"submit", write_job(jobs, "root", identity_job("root")).string(), "--socket", sock},
        top / "root.err");
    CHECK(r.code != 0);
    CHECK_THAT(read_text(top / "root.err"), Catch::Contains("allow_root_jobs"));
  }

  SECTION("a worker gets nowhere trying to become root or aiming the daemon at root's files") {
    const auto h = submit_as(
        alice,
        write_job(jobs, "hostile",
                  identity_job(
                      "hostile",
                      {{"hostile", {{"file", secret.string()}, {"folder", secret_dir.string()}}}}))
            .string());
    const auto failed = d.poll(h, done, 30s);
    INFO(failed.dump() << "\n" << d.log());
    CHECK(failed.at("state") == "failed");  // its first worker planted the links and crashed
    const json me = json::parse(read_text(state / h / "identity.json"));
    CHECK(me.at("hostile").at("setuid0") == "refused");
    CHECK(me.at("hostile").at("open") == "refused");
    CHECK(me.at("hostile").at("planted") == true);
    CHECK(me.at("uid") == alice.uid());
    // A resume starts a new runner: the job's log and history are opened afresh, where the
    // links now are, and the next worker's staging folder is made again.
    auto resumed = run_baton_as(alice.credentials(), {"resume", h, "--socket", sock});
    INFO(resumed.err);
    CHECK(resumed.code == 0);
    CHECK(d.poll(
               h, [](const json& s) { return s.at("state") == "completed"; }, 30s)
              .at("state") == "completed");
    // The daemon appended its lines, wrote its history and removed the staging folder after
    // the worker: through none of the links.
    CHECK(read_text(secret) == "root only\n");
    CHECK(lstat_of(secret).uid == 0);
    CHECK(lstat_of(secret).mode == 0600);
    CHECK(read_text(secret_dir / "keep") == "keep\n");
    CHECK(lstat_of(secret_dir).mode == 0700);
    // Removing the job walks its folder without following the links left in it.
    auto rm = run_baton_as(alice.credentials(), {"rm", h, "--socket", sock});
    INFO(rm.err);
    CHECK(rm.code == 0);
    CHECK_FALSE(fs::exists(state / h));
    CHECK(read_text(secret) == "root only\n");
    CHECK(read_text(secret_dir / "keep") == "keep\n");
  }

  d.signal(false);
  CHECK(d.wait(20s) == baton::os::exit_status::exited(0));
}

TEST_CASE("system mode refuses to start without cgroups, which alone hold another user's workers",
          "[integration][system_mode]") {
  if (::geteuid() != 0) {
    BATON_SKIP("system mode starts workers as other users, which needs root (CI runs as root)");
  }
  const auto dir = fresh_scratch_dir("baton-system-mode-no-cgroups");
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << json{{"jobs_run_as", "submitter"}}.dump();
  // The process-group fallback finds escapees by /proc/PID/environ, closed to the daemon once
  // a worker runs as someone else; forced here as on a host without usable cgroups.
  auto r =
      baton::test::run_process({BATON_EXE, "serve", "--settings", settings.string(), "--state-dir",
                                (dir / "state").string(), "--socket", (dir / "s.sock").string()},
                               {{"BATON_CONTAINMENT", "process-group"}}, dir / "serve.stderr", 30s);
  INFO(read_text(dir / "serve.stderr"));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status != baton::os::exit_status::exited(0));
  CHECK_THAT(read_text(dir / "serve.stderr"),
             Catch::Contains("jobs_run_as = \"submitter\" needs cgroup containment"));
  fs::remove_all(dir);
}

}  // namespace system_mode_test
