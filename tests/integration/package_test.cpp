// The Debian package as cpack builds it from this build tree: its file list, control fields and
// maintainer scripts, and the default settings it ships. Run through ctest as `package_deb`
// (label `package`; cmake/packaging.cmake). With BATON_TEST_DPKG_INSTALL=1 (as root, on a
// Debian system one may change) it also installs the package with dpkg -i, runs the installed
// baton and removes the package again.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "supervisor/daemon_settings.h"
#include "support/run_process.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using baton::os::exit_status;
using baton::test::run_process;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace package_test {

using baton::test::read_text;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool have(const char* tool) {
  return fs::exists(std::string("/usr/bin/") + tool) || fs::exists(std::string("/bin/") + tool);
}

TEST_CASE("the packaged default settings pass baton serve's validation", "[integration]") {
  const fs::path file = fs::path(BATON_SOURCE_DIR) / "deploy/settings.json";
  auto s = baton::supervisor::parse_daemon_settings(read_text(file), file.parent_path());
  REQUIRE(s);
  // The same paths the unit passes on its command line, and the group postinst creates.
  CHECK(s->state_dir == "/var/lib/baton");
  CHECK(s->socket == "/run/baton/baton.sock");
  CHECK(s->socket_group == std::optional<std::string>("baton"));
  // As Slurm and HTCondor: each job runs as the user who submitted it (the unit runs as root).
  CHECK(s->run_as == baton::supervisor::jobs_run_as::submitter);
  CHECK_FALSE(s->allow_root_jobs);
  const auto unit = read_text(fs::path(BATON_SOURCE_DIR) / "deploy/systemd/baton.service");
  CHECK(contains(unit, "--settings /etc/baton/settings.json"));
  CHECK(contains(unit, "--state-dir /var/lib/baton --socket /run/baton/baton.sock"));
}

TEST_CASE("cpack builds a Debian package with binaries, unit, settings and scripts",
          "[.][integration][package]") {
  const char* config = std::getenv("BATON_CPACK_CONFIG");
  if (config == nullptr) BATON_SKIP("needs BATON_CPACK_CONFIG: run it as ctest -L package");
  // cpack comes with cmake and dpkg-deb with dpkg, both part of set-up: missing, this fails.
  REQUIRE(have("cpack"));
  REQUIRE(have("dpkg-deb"));
  const auto dir = fs::temp_directory_path() / "baton-package-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto log = dir / "cpack.log";
  auto built = run_process({"cpack", "-G", "DEB", "--config", config, "-B", dir.string()}, {}, log,
                           std::chrono::seconds(100));
  INFO("cpack output:\n" << built.out << read_text(log));
  REQUIRE(built.status == exit_status::exited(0));
  fs::path deb;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".deb") deb = e.path();
  }
  REQUIRE(!deb.empty());
  CHECK(deb.filename().string().rfind("baton_", 0) == 0);

  auto contents = run_process({"dpkg-deb", "--contents", deb.string()});
  REQUIRE(contents.status == exit_status::exited(0));
  INFO("contents:\n" << contents.out);
  CHECK(contains(contents.out, "-rwxr-xr-x root/root"));
  CHECK(contains(contents.out, " ./usr/bin/baton\n"));
  CHECK(contains(contents.out, " ./usr/bin/baton-worker\n"));
  CHECK(contains(contents.out, " ./usr/lib/systemd/system/baton.service\n"));
  CHECK(contains(contents.out, " ./usr/lib/systemd/user/baton.service\n"));
  CHECK(contains(contents.out, " ./etc/baton/settings.json\n"));
  CHECK(contains(contents.out, " ./usr/share/doc/baton/README.md\n"));
  CHECK(contains(contents.out, " ./usr/share/doc/baton/deploy.md\n"));
  CHECK(contains(contents.out, " ./usr/lib/python3/dist-packages/baton/__init__.py\n"));
  // Generated from the CLI at build time (cli_docs/), and Debian's own files (lintian below).
  CHECK(contains(contents.out, " ./usr/share/man/man1/baton.1.gz\n"));
  CHECK(contains(contents.out, " ./usr/share/man/man1/baton-worker.1.gz\n"));
  CHECK(contains(contents.out, " ./usr/share/bash-completion/completions/baton\n"));
  CHECK(contains(contents.out, " ./usr/share/zsh/vendor-completions/_baton\n"));
  CHECK(contains(contents.out, " ./usr/share/doc/baton/copyright\n"));
  CHECK(contains(contents.out, " ./usr/share/doc/baton/changelog.Debian.gz\n"));
  CHECK(contains(contents.out, " ./usr/share/lintian/overrides/baton\n"));
  // Nothing from the test or bench trees.
  CHECK_FALSE(contains(contents.out, "_test"));
  CHECK_FALSE(contains(contents.out, "bench"));

  auto info = run_process({"dpkg-deb", "-I", deb.string()});
  REQUIRE(info.status == exit_status::exited(0));
  INFO("control:\n" << info.out);
  CHECK(contains(info.out, " Package: baton\n"));
  CHECK(contains(info.out, " Homepage: https://"));
  CHECK_FALSE(contains(info.out, "localhost"));
  for (const char* dep :
       {"libboost-filesystem1.81.0", "libxxhash0", "libsystemd0", "libgomp1", "adduser"}) {
    CHECK(contains(info.out, dep));
  }
  CHECK(contains(info.out, " postinst "));
  CHECK(contains(info.out, " prerm "));
  CHECK(contains(info.out, " postrm "));
  CHECK(contains(info.out, " conffiles "));

  const auto control = dir / "control";
  auto extracted = run_process({"dpkg-deb", "-e", deb.string(), control.string()});
  REQUIRE(extracted.status == exit_status::exited(0));
  CHECK(read_text(control / "conffiles") == "/etc/baton/settings.json\n");
  CHECK(contains(read_text(control / "postinst"), "adduser --system --group"));
  CHECK((fs::status(control / "postinst").permissions() & fs::perms::owner_exec) !=
        fs::perms::none);

  // Every NEEDED library of the binaries is one the package depends on (or libc's family).
  const auto bin = dir / "root";
  auto unpacked = run_process({"dpkg-deb", "-x", deb.string(), bin.string()});
  REQUIRE(unpacked.status == exit_status::exited(0));
  if (have("readelf")) {
    for (const char* exe : {"usr/bin/baton", "usr/bin/baton-worker"}) {
      auto needed = run_process({"readelf", "-d", (bin / exe).string()});
      REQUIRE(needed.status == exit_status::exited(0));
      std::istringstream lines(needed.out);
      std::string line;
      while (std::getline(lines, line)) {
        const auto open = line.find("Shared library: [");
        if (open == std::string::npos) continue;
        const auto lib = line.substr(open + 17, line.find(']') - open - 17);
        INFO(exe << " needs " << lib);
        const bool covered = contains(lib, "boost_filesystem") || contains(lib, "xxhash") ||
                             contains(lib, "systemd") || contains(lib, "gomp") ||
                             contains(lib, "stdc++") || contains(lib, "gcc_s") ||
                             lib.rfind("libc.", 0) == 0 || lib.rfind("libm.", 0) == 0 ||
                             contains(lib, "ld-linux");
        CHECK(covered);
      }
    }
  }

  // Debian's policy checker: any error or warning fails; the package's own overrides file
  // (deploy/debian/lintian-overrides, one reason per line) is the only way to accept one.
  REQUIRE(have("lintian"));  // scripts/setup.sh installs it
  const auto lintian_log = dir / "lintian.stderr";
  auto lint = run_process({"lintian", "--tag-display-limit", "0", deb.string()}, {}, lintian_log,
                          std::chrono::seconds(100));
  INFO("lintian:\n" << lint.out << read_text(lintian_log));
  CHECK(lint.status == exit_status::exited(0));
  std::istringstream lint_lines(lint.out);
  for (std::string line; std::getline(lint_lines, line);) {
    INFO(line);
    CHECK_FALSE((line.rfind("E: ", 0) == 0 || line.rfind("W: ", 0) == 0));
  }
  // Nothing beyond the overrides the file states, each with its reason on the line above.
  const auto overrides = read_text(fs::path(BATON_SOURCE_DIR) / "deploy/debian/lintian-overrides");
  std::istringstream override_lines(overrides);
  std::string previous;
  int tags = 0;
  for (std::string line; std::getline(override_lines, line); previous = line) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    CHECK(previous.rfind("# ", 0) == 0);
    ++tags;
  }
  CHECK(tags <= 2);

  const char* install = std::getenv("BATON_TEST_DPKG_INSTALL");
  if (install == nullptr || std::string(install) != "1") {
    fs::remove_all(dir);
    return;
  }
  // The real thing: this changes the system (a package, a user), so only when asked.
  const auto dpkg_log = dir / "dpkg.log";
  auto installed = run_process({"dpkg", "-i", deb.string()}, {}, dpkg_log);
  INFO("dpkg -i:\n" << installed.out << read_text(dpkg_log));
  REQUIRE(installed.status == exit_status::exited(0));
  auto version = run_process({"/usr/bin/baton", "--version"});
  CHECK(version.status == exit_status::exited(0));
  CHECK(contains(version.out, "."));  // a version number
  auto user = run_process({"getent", "passwd", "baton"});
  CHECK(user.status == exit_status::exited(0));
  CHECK(fs::exists("/etc/baton/settings.json"));
  auto removed = run_process({"dpkg", "-r", "baton"}, {}, dpkg_log);
  INFO("dpkg -r:\n" << removed.out << read_text(dpkg_log));
  CHECK(removed.status == exit_status::exited(0));
  CHECK_FALSE(fs::exists("/usr/bin/baton"));
  // A conffile outlives `remove` (only purge deletes it).
  CHECK(fs::exists("/etc/baton/settings.json"));
  auto purged = run_process({"dpkg", "--purge", "baton"}, {}, dpkg_log);
  CHECK(purged.status == exit_status::exited(0));
  CHECK_FALSE(fs::exists("/etc/baton/settings.json"));
  fs::remove_all(dir);
}

}  // namespace package_test
