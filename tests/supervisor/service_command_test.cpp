// `baton service`: the service's command line (what the SCM will run, quoted for Windows), the
// recovery actions and name checks, all plain data; and on platforms without an SCM, that the
// verb and `serve --service` refuse clearly. The real SCM round trip is
// tests/integration/service_windows_test.cpp.
#include "supervisor/service_command.h"

#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "os/service_host.h"
#include "supervisor/cli.h"
#include "support/cli_run.h"

using namespace baton;
using namespace baton::supervisor;
using namespace std::chrono_literals;

using baton::test::baton_cli;

TEST_CASE("the service runs serve --service with every path it was given", "[unit][service]") {
  service_install_request r;
  r.baton_exe = R"(C:\Program Files\baton\baton.exe)";
  CHECK(service_argv(r) == std::vector<std::string>{r.baton_exe, "serve", "--service"});

  r.settings_file = R"(C:\ProgramData\baton\settings.json)";
  r.state_dir = R"(D:\baton state)";
  r.log_file = R"(D:\baton state\service.log)";
  r.worker_exe = R"(C:\Program Files\baton\baton-worker.exe)";
  CHECK(service_argv(r) == std::vector<std::string>{r.baton_exe, "serve", "--service", "--settings",
                                                    r.settings_file, "--state-dir", r.state_dir,
                                                    "--log-file", r.log_file, "--worker",
                                                    r.worker_exe});

  const auto o = service_install_options_for(r);
  CHECK(o.name == "baton");
  CHECK(o.display_name == "baton training supervisor");
  CHECK_FALSE(o.description.empty());
  CHECK(o.command_line ==
        R"("C:\Program Files\baton\baton.exe" serve --service --settings )"
        R"(C:\ProgramData\baton\settings.json --state-dir "D:\baton state" --log-file )"
        R"("D:\baton state\service.log" --worker "C:\Program Files\baton\baton-worker.exe")");
  CHECK(o.restart_delays == std::vector<std::chrono::milliseconds>{5s, 10s, 30s});
  CHECK(o.reset_period == 24h);

  // The SCM wants display names unique as well.
  r.name = "baton-gpu";
  const auto second = service_install_options_for(r);
  CHECK(second.name == "baton-gpu");
  CHECK(second.display_name == "baton training supervisor (baton-gpu)");
  r.display_name = "baton (GPU box)";
  CHECK(service_install_options_for(r).display_name == "baton (GPU box)");
}

TEST_CASE("service names the SCM would refuse are caught first", "[unit][service]") {
  CHECK(check_service_name("baton"));
  CHECK(check_service_name(std::string(256, 'b')));
  CHECK_FALSE(check_service_name(""));
  CHECK_FALSE(check_service_name(std::string(257, 'b')));
  const auto slash = check_service_name("a/b");
  REQUIRE_FALSE(slash);
  CHECK(slash.error().message.find("'/'") != std::string::npos);
  CHECK_FALSE(check_service_name(R"(a\b)"));
}

TEST_CASE("baton service needs a subcommand", "[unit][service][cli]") {
  const auto r = baton_cli({"service"});
  CHECK(r.code == exit_usage);
}

TEST_CASE("without an SCM, baton service and serve --service point at systemd",
          "[unit][service][cli]") {
  if (os::service_manager_supported()) {
    SUCCEED("this platform has a Service Control Manager");
    return;
  }
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"service", "install"},
                                             {"service", "install", "--name", "x"},
                                             {"service", "reload"},
                                             {"service", "uninstall"}}) {
    const auto r = baton_cli(args);
    CHECK(r.code == exit_invalid);
    CHECK(r.err.find("deploy/systemd/baton.service") != std::string::npos);
    CHECK(r.out.empty());
  }
  const auto serve = baton_cli({"serve", "--service"});
  CHECK(serve.code == exit_invalid);
  CHECK(serve.err.find("baton serve --service: ") != std::string::npos);
  CHECK(serve.err.find("deploy/systemd/baton.service") != std::string::npos);
}

TEST_CASE("serve --service outside the SCM says how to run it and fails", "[unit][service][cli]") {
  if (!os::service_manager_supported()) {
    SUCCEED("no Service Control Manager here: the test above covers this platform");
    return;
  }
  // ctest started this process, not the SCM: StartServiceCtrlDispatcherW fails with 1063.
  const auto r = baton_cli({"serve", "--service"});
  CHECK(r.code == exit_failure);
  CHECK(r.err.find("error 1063") != std::string::npos);
  CHECK(r.err.find("without --service") != std::string::npos);
}
