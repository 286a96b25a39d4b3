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

using namespace baton;
using namespace std::chrono_literals;

namespace {

// The C runtime's (and CommandLineToArgvW's) split of the arguments after the program name:
// 2n backslashes + quote -> n backslashes and a quote toggle; 2n+1 -> n and a literal quote;
// backslashes before anything else are literal; "" inside quotes is a literal quote.
std::vector<std::string> split_windows_arguments(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (true) {
    while (i < line.size() && space(line[i])) ++i;
    if (i >= line.size()) break;
    std::string arg;
    bool quoted = false;
    while (i < line.size() && (quoted || !space(line[i]))) {
      std::size_t n = 0;
      while (i < line.size() && line[i] == '\\') {
        ++n;
        ++i;
      }
      if (i < line.size() && line[i] == '"') {
        arg.append(n / 2, '\\');
        if (n % 2 == 1) {
          arg += '"';
        } else if (quoted && i + 1 < line.size() && line[i + 1] == '"') {
          arg += '"';
          ++i;
        } else {
          quoted = !quoted;
        }
        ++i;
      } else {
        arg.append(n, '\\');
        if (i < line.size() && (quoted || !space(line[i]))) arg += line[i++];
      }
    }
    out.push_back(arg);
  }
  return out;
}

struct cli_run {
  int code;
  std::string out;
  std::string err;
};

cli_run run(std::vector<std::string> args) {
  args.insert(args.begin(), "baton");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(args.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace

TEST_CASE("windows_command_line quotes only what needs it", "[unit][service]") {
  CHECK(windows_command_line({R"(C:\Program Files\baton\baton.exe)", "serve", "--service"}) ==
        R"("C:\Program Files\baton\baton.exe" serve --service)");
  CHECK(windows_command_line({R"(C:\baton\baton.exe)", R"(C:\data\settings.json)"}) ==
        R"(C:\baton\baton.exe C:\data\settings.json)");
  CHECK(windows_command_line({"a", ""}) == R"(a "")");
  CHECK(windows_command_line({"a", R"(say "hi")"}) == R"(a "say \"hi\"")");
  // Trailing backslashes inside quotes are doubled, or they would escape the closing quote.
  CHECK(windows_command_line({"a", R"(C:\dir with space\)"}) == R"(a "C:\dir with space\\")");
  CHECK(windows_command_line({"a", R"(x\"y)"}) == R"(a "x\\\"y")");
  CHECK(windows_command_line({"a", R"(no\\space)"}) == R"(a no\\space)");
}

TEST_CASE("windows_command_line round-trips through the C runtime's split", "[unit][service]") {
  const std::vector<std::string> args = {"plain",
                                         "",
                                         " ",
                                         "two words",
                                         R"(trail\)",
                                         R"(trail\\)",
                                         R"(q")",
                                         R"(\")",
                                         R"(\\")",
                                         R"(a\\\"b c)",
                                         "tab\there",
                                         R"(C:\P F\)",
                                         "\"quoted\"",
                                         "new\nline",
                                         R"(\\srv\share\x y\)",
                                         "caf\xc3\xa9 \xe2\x82\xac"};
  for (const auto& a : args) {
    INFO("argument [" << a << "]");
    const auto line = windows_command_line({"prog.exe", a, "next"});
    const auto back = split_windows_arguments(line);
    REQUIRE(back.size() == 3);
    CHECK(back[1] == a);
    CHECK(back[2] == "next");
  }
}

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
  const auto r = run({"service"});
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
    const auto r = run(args);
    CHECK(r.code == exit_invalid);
    CHECK(r.err.find("deploy/systemd/baton.service") != std::string::npos);
    CHECK(r.out.empty());
  }
  const auto serve = run({"serve", "--service"});
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
  const auto r = run({"serve", "--service"});
  CHECK(r.code == exit_failure);
  CHECK(r.err.find("error 1063") != std::string::npos);
  CHECK(r.err.find("without --service") != std::string::npos);
}
