// Per-user mode with real processes (issue 14): the per-user unit's own command line, read from
// deploy/systemd/user/baton.service with %t and %h expanded to a runtime folder and a home made
// for the test, is started as a non-root user with XDG_RUNTIME_DIR and HOME set as a login
// gives them; that same user then runs `baton submit` with no --socket and waits for the job.
// As root the user is one made for the test (support/test_users.h); as anyone else, themselves.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "support/daemon_process.h"
#include "support/test_paths.h"
#include "support/test_users.h"

using namespace baton::test;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace per_user_mode_test {

// The unit's ExecStart= words (the line has no quoting), %t and %h expanded as systemd does.
std::vector<std::string> unit_command(const fs::path& runtime, const fs::path& home) {
  std::ifstream unit(std::string(BATON_SOURCE_DIR) + "/deploy/systemd/user/baton.service");
  REQUIRE(unit);
  std::string line;
  while (std::getline(unit, line)) {
    if (line.rfind("ExecStart=", 0) != 0) continue;
    std::istringstream words(line.substr(std::string("ExecStart=").size()));
    std::vector<std::string> argv;
    for (std::string w; words >> w;) {
      const std::pair<std::string, std::string> specifiers[] = {{"%t", runtime.string()},
                                                                {"%h", home.string()}};
      for (const auto& [spec, value] : specifiers) {
        for (auto at = w.find(spec); at != std::string::npos; at = w.find(spec, at)) {
          w.replace(at, spec.size(), value);
          at += value.size();
        }
      }
      argv.push_back(w);
    }
    REQUIRE_FALSE(argv.empty());
    CHECK(argv[0] == "/usr/bin/baton");
    argv[0] = BATON_EXE;  // the binary under test, not an installed one
    return argv;
  }
  FAIL("no ExecStart= in the per-user unit");
  return {};
}

void give(const fs::path& p, const std::optional<baton::os::process_credentials>& to) {
  fs::create_directories(p);
  fs::permissions(p, fs::perms::owner_all);
  if (to) REQUIRE(::chown(p.c_str(), to->uid, to->gid) == 0);
}

TEST_CASE("per-user mode: the user unit's command line serves its user, found with no --socket",
          "[integration][per_user_mode]") {
  const auto top = fresh_scratch_dir("baton-per-user-mode");
  fs::permissions(top, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  std::optional<test_user> made;
  std::optional<baton::os::process_credentials> as;
  if (::geteuid() == 0) {
    made.emplace("p", 61003);
    as = made->credentials();
  }
  const std::uint32_t uid = as ? as->uid : ::geteuid();
  const auto runtime = top / "run-user";
  const auto home = top / "home";
  give(runtime, as);
  give(runtime / "baton", as);  // RuntimeDirectory=baton, as systemd makes it
  give(home, as);
  const std::vector<std::pair<std::string, std::string>> login_env = {
      {"XDG_RUNTIME_DIR", runtime.string()}, {"HOME", home.string()}, {"BATON_SOCKET", ""}};

  // A user manager's PATH is not the login shell's: the shell's has the user's own python.
  const std::string manager_path = "/usr/local/bin:/usr/bin:/bin";
  const auto shell_bin = top / "shell-bin";
  fs::create_directories(shell_bin);
  const std::string own_python = "baton-test-python-" + std::to_string(::getpid());
  fs::create_symlink(python(), shell_bin / own_python);
  const std::string shell_path = shell_bin.string() + ":" + manager_path;
  auto client_env = login_env;
  client_env.emplace_back("PATH", shell_path);

  asio::io_context io;
  baton::os::spawn_options o;
  o.argv = unit_command(runtime, home);
  o.env = login_env;
  o.env.emplace_back("PATH", manager_path);
  o.credentials = as;
  std::string daemon_err;
  o.on_stderr = [&](const boost::system::error_code& ec, std::string_view data) {
    if (!ec) daemon_err += data;
  };
  auto daemon = baton::os::spawn(io, o);
  REQUIRE(daemon);
  std::optional<baton::os::exit_status> ended;
  (*daemon)->async_read_lines([](const boost::system::error_code&, std::string_view) {});
  (*daemon)->async_wait(
      [&](const boost::system::error_code&, baton::os::exit_status st) { ended = st; });
  const auto sock = runtime / "baton" / "baton.sock";
  const auto deadline = clock_type::now() + 15s;
  while (!fs::exists(sock) && !ended && clock_type::now() < deadline) io.run_for(50ms);
  INFO(daemon_err);
  REQUIRE(fs::exists(sock));

  const auto job = top / "job.json";
  const json doc = {{"name", "mine"},
                    {"worker",
                     {{"command",
                       {own_python, std::string(BATON_SOURCE_DIR) +
                                        "/tests/integration/workers/identity_worker.py"}}}},
                    {"shard", {{"steps", 10}}},
                    {"memory", {{"poll_ms", 50}}},
                    {"params", {{"total_steps", 3}}}};
  std::ofstream(job) << doc.dump(2);
  fs::permissions(job, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read |
                           fs::perms::group_read);

  const auto me =
      as ? *as : baton::os::process_credentials{uid, static_cast<std::uint32_t>(::getegid()), {}};
  // No --socket: the client finds the user's own daemon in $XDG_RUNTIME_DIR.
  auto sub = as ? run_baton_as(*as, {"submit", job.string()}, client_env) : [&] {
    user_outcome r;
    auto plain = run_baton({"submit", job.string()}, top / "submit.err", 30s, client_env);
    r.code = plain.code;
    r.out = plain.out;
    r.err = read_text(top / "submit.err");
    return r;
  }();
  INFO(sub.err << daemon_err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  auto wait = as ? run_baton_as(*as, {"wait", id}, login_env, 60s) : [&] {
    user_outcome r;
    auto plain = run_baton({"wait", id}, top / "wait.err", 60s, login_env);
    r.code = plain.code;
    r.err = read_text(top / "wait.err");
    return r;
  }();
  INFO(wait.err);
  CHECK(wait.code == 0);
  // State under ~/.local/state/baton, as the unit says, and the worker ran as the user.
  const auto job_dir = home / ".local" / "state" / "baton" / "jobs" / id;
  const json identity = json::parse(read_text(job_dir / "identity.json"));
  CHECK(identity.at("uid") == me.uid);
  // The bare program was found on the shell's PATH the client sent, which the worker has too.
  CHECK(identity.at("env").at("PATH") == shell_path);
  CHECK(identity.at("executable") == (shell_bin / own_python).string());

  REQUIRE((*daemon)->signal_group(baton::os::group_signal::terminate));
  const auto stop_by = clock_type::now() + 20s;
  while (!ended && clock_type::now() < stop_by) io.run_for(50ms);
  CHECK(ended == baton::os::exit_status::exited(0));
}

}  // namespace per_user_mode_test
