// deploy/systemd/baton.service must pass `systemd-analyze verify` without a single warning:
// unknown keys only warn (rc 0), so the test reads stderr too.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/run_process.h"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The unit names /usr/bin/baton; verify checks that ExecStart exists, so point it at this build.
fs::path unit_for_this_build(const fs::path& dir, const std::string& extra_line = {}) {
  std::string unit = read_text(fs::path(BATON_SOURCE_DIR) / "deploy/systemd/baton.service");
  const std::string from = "/usr/bin/baton ";
  const auto pos = unit.find(from);
  REQUIRE(pos != std::string::npos);
  unit.replace(pos, from.size(), std::string(BATON_EXE) + " ");
  if (!extra_line.empty()) {
    const auto service = unit.find("[Service]\n");
    unit.insert(service + 10, extra_line + "\n");
  }
  fs::create_directories(dir);
  const auto path = dir / "baton.service";
  std::ofstream(path) << unit;
  return path;
}

bool have_systemd_analyze() {
  return fs::exists("/usr/bin/systemd-analyze") || fs::exists("/bin/systemd-analyze");
}

}  // namespace

TEST_CASE("the systemd unit verifies without warnings", "[integration][systemd]") {
  // Issue 5 asks for this check to run, so a missing tool fails rather than skips.
  if (!have_systemd_analyze()) {
    FAIL("systemd-analyze not installed (scripts/setup.sh installs the systemd package)");
  }
  const auto dir = fs::temp_directory_path() / "baton-unit-test";
  fs::remove_all(dir);
  const auto unit = unit_for_this_build(dir / "good");
  const auto log = dir / "verify.stderr";
  auto r = baton::test::run_process({"systemd-analyze", "verify", unit.string()}, {}, log);
  CHECK(r.status == baton::os::exit_status::exited(0));
  CHECK(read_text(log) == "");
  CHECK(r.out == "");

  // The check can fail: an unknown key is only a warning, and it must show up.
  const auto bad = unit_for_this_build(dir / "bad", "NoSuchSetting=yes");
  const auto bad_log = dir / "bad.stderr";
  auto rb = baton::test::run_process({"systemd-analyze", "verify", bad.string()}, {}, bad_log);
  CHECK(read_text(bad_log).find("NoSuchSetting") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("the systemd unit carries the settings the service relies on", "[unit][systemd]") {
  const auto unit = read_text(fs::path(BATON_SOURCE_DIR) / "deploy/systemd/baton.service");
  for (const char* line :
       {"Type=notify", "WatchdogSec=", "Restart=on-failure", "User=baton", "StateDirectory=baton",
        "RuntimeDirectory=baton", "KillMode=mixed", "TimeoutStopSec=", "NoNewPrivileges=yes",
        "ProtectSystem=strict", "ReadWritePaths=/var/lib/baton", "Delegate=yes",
        "ProtectControlGroups=no",
        // Jobs reach their data and GPUs as their user would (issue 14).
        "ProtectHome=no", "PrivateTmp=no", "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw", "DeviceAllow=char-nvidia-uvm rw",
        "DeviceAllow=char-kfd rw", "DeviceAllow=char-drm rw", "CapabilityBoundingSet=\n"}) {
    INFO(line);
    CHECK(unit.find(std::string("\n") + line) != std::string::npos);
  }
  // PrivateDevices would hide /dev/nvidia*; a fixed MemoryMax is the machine's business.
  for (const char* line : {"PrivateDevices=", "MemoryMax=", "MemoryDenyWriteExecute="}) {
    INFO(line);
    CHECK(unit.find(std::string("\n") + line) == std::string::npos);
  }
}

TEST_CASE("the systemd unit's exposure stays at the score the README records",
          "[integration][systemd]") {
  if (!have_systemd_analyze()) {
    FAIL("systemd-analyze not installed (scripts/setup.sh installs the systemd package)");
  }
  // systemd-analyze security scores a unit offline; deploy/README.md records 3.6 for the
  // GPU-ready unit. A change that loosens the sandbox must say so there and here.
  const auto dir = fs::temp_directory_path() / "baton-unit-security";
  fs::remove_all(dir);
  const auto unit = unit_for_this_build(dir / "good");
  auto r = baton::test::run_process(
      {"systemd-analyze", "security", "--offline=yes", "--no-pager", unit.string()}, {},
      dir / "security.stderr");
  INFO(r.out);
  const auto at = r.out.find("Overall exposure level for baton.service: ");
  REQUIRE(at != std::string::npos);
  const double score = std::stod(
      r.out.substr(at + std::string_view("Overall exposure level for baton.service: ").size()));
  CHECK(score <= 3.6);
  CHECK(score > 0.0);
  fs::remove_all(dir);
}
