#include "supervisor/daemon_settings.h"

#include <catch2/catch.hpp>
#include <string>

#include "os/mem_env.h"
#include "supervisor/control_server.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

std::string error_of(std::string_view text) {
  auto s = parse_daemon_settings(text, "/etc/baton");
  REQUIRE_FALSE(s);
  return s.error().message;
}

}  // namespace

TEST_CASE("an empty settings object gives every default", "[unit][daemon_settings]") {
  auto s = parse_daemon_settings("{}", "/etc/baton");
  REQUIRE(s);
  CHECK(*s == daemon_settings{});
  CHECK(s->max_workers == 1);
  CHECK(s->level == log_level::info);
  CHECK(s->max_checkpoint_mib == 1024);
  CHECK_FALSE(s->socket_group);
  CHECK_FALSE(s->default_soft_limit_mib);
}

TEST_CASE("every field is read, relative paths resolve against the file's folder",
          "[unit][daemon_settings]") {
  auto s = parse_daemon_settings(R"({
    "state_dir": "state/../jobs", "socket": "/run/baton/b.sock", "socket_group": "baton",
    "max_workers": 3, "default_memory": {"soft_limit_mib": 1024, "hard_limit_mib": 2048},
    "log_level": "debug", "max_checkpoint_mib": 4096})",
                                 "/etc/baton");
  REQUIRE(s);
  CHECK(s->max_checkpoint_mib == 4096);
  CHECK(s->state_dir == fs::path("/etc/baton/jobs"));
  CHECK(s->socket == fs::path("/run/baton/b.sock"));
  CHECK(s->socket_group == "baton");
  CHECK(s->max_workers == 3);
  CHECK(s->default_soft_limit_mib == 1024);
  CHECK(s->default_hard_limit_mib == 2048);
  CHECK(s->level == log_level::debug);
  // The JSON form round-trips.
  auto again = parse_daemon_settings(to_json(*s).dump(), "/elsewhere");
  REQUIRE(again);
  CHECK(*again == *s);
}

TEST_CASE("every problem is reported at once, each with its JSON path", "[unit][daemon_settings]") {
  const auto e = error_of(R"({"max_workers": 0, "log_level": "verbose", "socket_group": 7,
    "default_memory": {"soft_limit_mib": -1, "hard_limit_mib": "lots"}, "state_dir": ""})");
  CHECK_THAT(e, Catch::Contains("max_workers: expected a positive integer, got 0"));
  CHECK_THAT(e, Catch::Contains("log_level: unknown log level \"verbose\""));
  CHECK_THAT(e, Catch::Contains("socket_group: expected a group name or null, got 7"));
  CHECK_THAT(e, Catch::Contains("default_memory.soft_limit_mib: expected a positive integer"));
  CHECK_THAT(e, Catch::Contains("default_memory.hard_limit_mib: expected a positive integer, "
                                "got \"lots\""));
  CHECK_THAT(e, Catch::Contains("state_dir: expected a non-empty path string"));
}

TEST_CASE("unknown keys get a suggestion", "[unit][daemon_settings]") {
  CHECK_THAT(error_of(R"({"max_worker": 2})"),
             Catch::Contains("max_worker: unknown key; did you mean \"max_workers\"?"));
  CHECK_THAT(error_of(R"({"default_memory": {"soft_limit": 5}})"),
             Catch::Contains("default_memory.soft_limit: unknown key; did you mean "
                             "\"soft_limit_mib\"?"));
  CHECK_THAT(error_of(R"({"zzz": 1})"),
             Catch::Contains("zzz: unknown key; expected one of state_dir, socket"));
  CHECK_THAT(error_of(R"({"log_level": "debgu"})"), Catch::Contains("did you mean \"debug\"?"));
}

TEST_CASE("cross-field and range rules", "[unit][daemon_settings]") {
  CHECK_THAT(error_of(R"({"default_memory": {"soft_limit_mib": 2048, "hard_limit_mib": 1024}})"),
             Catch::Contains("default_memory.soft_limit_mib: must be below "
                             "default_memory.hard_limit_mib (2048 >= 1024)"));
  CHECK_THAT(error_of(R"({"max_workers": 100000})"),
             Catch::Contains("max_workers: expected at most 1024"));
  CHECK_THAT(error_of(R"({"max_workers": 2.5})"),
             Catch::Contains("max_workers: expected a positive integer, got 2.5"));
  const std::string long_socket = "{\"socket\": \"/" + std::string(120, 's') + "\"}";
  if (native_control_transport() == control_transport::unix_socket) {
    CHECK_THAT(error_of(long_socket),
               Catch::Contains("socket: path is 121 bytes; Unix sockets allow at most 107"));
  } else {
    CHECK(parse_daemon_settings(long_socket, "/etc/baton"));  // the endpoint file: any length
  }
  CHECK_THAT(error_of("[]"), Catch::Contains("(document): expected an object, got []"));
}

TEST_CASE("hostile documents: syntax, duplicates, depth, size", "[unit][daemon_settings]") {
  CHECK_THAT(error_of(R"({"max_workers": 2,})"), Catch::Contains("invalid JSON at byte"));
  CHECK_THAT(error_of(R"({"max_workers": 2, "max_workers": 3})"),
             Catch::Contains("duplicate key \"max_workers\""));
  CHECK_THAT(error_of(std::string(100000, '[') + std::string(100000, ']')),
             Catch::Contains("nesting deeper than"));
  CHECK_THAT(error_of("{\"state_dir\": \"" + std::string(2 << 20, 'a') + "\"}"),
             Catch::Contains("at most 1 MiB"));
}

TEST_CASE("a settings file's errors name the file on every line", "[unit][daemon_settings]") {
  baton::os::mem_env e;
  const fs::path dir = baton::test::abs_path("/etc/baton");
  const fs::path file = dir / "daemon.json";
  REQUIRE(e.create_dirs(dir));
  REQUIRE(baton::os::write_file_atomic(e, file, R"({"max_workers": 0, "log_lvl": "info"})"));
  auto s = load_daemon_settings(e, file);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains(file.string() + ": max_workers: expected"));
  CHECK_THAT(s.error().message,
             Catch::Contains(file.string() + ": log_lvl: unknown key; did you mean "
                                             "\"log_level\"?"));
  auto missing = load_daemon_settings(e, dir / "none.json");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("cannot read settings file"));

  REQUIRE(baton::os::write_file_atomic(e, dir / "ok.json", R"({"state_dir": "jobs"})"));
  auto ok = load_daemon_settings(e, dir / "ok.json");
  REQUIRE(ok);
  CHECK(ok->state_dir == dir / "jobs");
}

TEST_CASE("log level names round trip", "[unit][daemon_settings]") {
  for (auto l : {log_level::error, log_level::warning, log_level::info, log_level::debug}) {
    auto parsed = parse_log_level(to_string(l));
    REQUIRE(parsed);
    CHECK(*parsed == l);
  }
  CHECK_FALSE(parse_log_level("INFO"));
}

TEST_CASE("control_port: 0 to 65535, named in every error", "[unit][daemon_settings]") {
  auto s = parse_daemon_settings(R"({"control_port": 0})", "/base");
  REQUIRE(s);
  CHECK(s->control_port == 0);
  s = parse_daemon_settings(R"({"control_port": 65535})", "/base");
  REQUIRE(s);
  CHECK(s->control_port == 65535);
  s = parse_daemon_settings(R"({"control_port": null})", "/base");
  REQUIRE(s);
  CHECK_FALSE(s->control_port);
  CHECK(to_json(*s).at("control_port").is_null());
  for (const char* bad : {"-1", "65536", "8080.5", "\"8080\"", "true", "1e30"}) {
    INFO(bad);
    CHECK_THAT(error_of(std::string(R"({"control_port": )") + bad + "}"),
               Catch::Contains("control_port: expected a port from 0 to 65535"));
  }
  CHECK_THAT(error_of(R"({"control_prot": 1})"),
             Catch::Contains("control_prot: unknown key; did you mean \"control_port\"?"));
}

TEST_CASE("http_listen: off by default, loopback only, named in every error",
          "[unit][daemon_settings]") {
  auto s = parse_daemon_settings("{}", "/base");
  REQUIRE(s);
  CHECK_FALSE(s->http_listen);
  CHECK(to_json(*s).at("http_listen").is_null());
  s = parse_daemon_settings(R"({"http_listen": "127.0.0.1:9464"})", "/base");
  REQUIRE(s);
  CHECK(s->http_listen == "127.0.0.1:9464");
  CHECK(to_json(*s).at("http_listen") == "127.0.0.1:9464");
  CHECK_THAT(error_of(R"({"http_listen": "0.0.0.0:9464"})"),
             Catch::Contains("http_listen: 0.0.0.0 is not a loopback address"));
  CHECK_THAT(error_of(R"({"http_listen": "192.168.1.4:80"})"),
             Catch::Contains("http_listen: 192.168.1.4 is not a loopback address"));
  CHECK_THAT(error_of(R"({"http_listen": "127.0.0.1"})"), Catch::Contains("http_listen: expected"));
  CHECK_THAT(error_of(R"({"http_listen": 9464})"),
             Catch::Contains("http_listen: expected \"127.0.0.1:PORT\" or null, got"));
}

TEST_CASE("a long wrong value is cut on a UTF-8 boundary", "[unit][daemon_settings]") {
  // Byte 61, where the quote is cut, falls inside an "é": the cut used to split it, and dump()
  // threw on the half character instead of the settings error being reported.
  const std::string value = std::string(60, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";
  std::string e;
  REQUIRE_NOTHROW(e = error_of(R"({"max_workers": ")" + value + "\"}"));
  CHECK(e == "max_workers: expected a positive integer, got \"" + std::string(60, 'a') + "...\"");
}

TEST_CASE("connection limits: defaults, ranges, per uid below the global limit",
          "[unit][daemon_settings]") {
  auto d = parse_daemon_settings("{}", "/etc/baton");
  REQUIRE(d);
  CHECK(d->header_timeout_ms == 5000);
  CHECK(d->max_connections == 256);
  CHECK(d->max_connections_per_uid == 32);
  auto s = parse_daemon_settings(
      R"({"header_timeout_ms": 800, "max_connections": 40, "max_connections_per_uid": 4})",
      "/etc/baton");
  REQUIRE(s);
  CHECK(s->header_timeout_ms == 800);
  CHECK(s->max_connections == 40);
  CHECK(s->max_connections_per_uid == 4);
  CHECK(to_json(*s).at("max_connections_per_uid") == 4);
  CHECK_THAT(error_of(R"({"max_connections": 8, "max_connections_per_uid": 8})"),
             Catch::Contains("max_connections_per_uid: must be below max_connections (8 >= 8)"));
  auto small = parse_daemon_settings(R"({"max_connections": 10})", "/etc/baton");
  REQUIRE(small);
  CHECK(small->max_connections_per_uid == 5);  // follows it down when left out
  CHECK_THAT(error_of(R"({"max_connections": 1})"),
             Catch::Contains("max_connections_per_uid: must be below max_connections (1 >= 1)"));
  CHECK_THAT(error_of(R"({"max_connections_per_uid": 300})"),
             Catch::Contains("max_connections_per_uid: must be below max_connections (300 >= "
                             "256)"));
  CHECK_THAT(error_of(R"({"header_timeout_ms": 0})"),
             Catch::Contains("header_timeout_ms: expected a positive integer, got 0"));
  CHECK_THAT(error_of(R"({"header_timeout_ms": 6000000})"),
             Catch::Contains("header_timeout_ms: expected at most 600000"));
  CHECK_THAT(error_of(R"({"max_connections": 100000})"),
             Catch::Contains("max_connections: expected at most 65536"));
  CHECK_THAT(error_of(R"({"max_connection": 5})"),
             Catch::Contains("did you mean \"max_connections\"?"));
}

TEST_CASE("log rotation settings: defaults, values, and errors naming the field",
          "[unit][daemon_settings]") {
  auto d = parse_daemon_settings("{}", "/etc/baton");
  REQUIRE(d);
  CHECK(d->log_max_mib == 64);
  CHECK(d->log_keep == 3);
  auto s = parse_daemon_settings(R"({"log_max_mib": 8, "log_keep": 10})", "/etc/baton");
  REQUIRE(s);
  CHECK(s->log_max_mib == 8);
  CHECK(s->log_keep == 10);
  CHECK(to_json(*s).at("log_max_mib") == 8);
  CHECK(to_json(*s).at("log_keep") == 10);
  auto bad = parse_daemon_settings(R"({"log_max_mib": 0, "log_keep": 1001})", "/etc/baton");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("log_max_mib: expected a positive integer"));
  CHECK_THAT(bad.error().message, Catch::Contains("log_keep: expected at most 1000"));
  auto typed = parse_daemon_settings(R"({"log_keep": "3", "log_max_mb": 1})", "/etc/baton");
  REQUIRE_FALSE(typed);
  CHECK_THAT(typed.error().message, Catch::Contains("log_keep: expected a positive integer"));
  CHECK_THAT(typed.error().message, Catch::Contains("did you mean \"log_max_mib\"?"));
}

TEST_CASE("jobs_run_as and allow_root_jobs: defaults, values, and errors naming the field",
          "[unit][daemon_settings]") {
  auto d = parse_daemon_settings("{}", "/etc/baton");
  REQUIRE(d);
  CHECK(d->run_as == jobs_run_as::daemon);
  CHECK_FALSE(d->allow_root_jobs);
  CHECK(to_json(*d).at("jobs_run_as") == "daemon");
  auto s = parse_daemon_settings(R"({"jobs_run_as": "submitter", "allow_root_jobs": true})",
                                 "/etc/baton");
  REQUIRE(s);
  CHECK(s->run_as == jobs_run_as::submitter);
  CHECK(s->allow_root_jobs);
  CHECK(to_json(*s).at("jobs_run_as") == "submitter");
  CHECK(to_json(*s).at("allow_root_jobs") == true);
  auto bad =
      parse_daemon_settings(R"({"jobs_run_as": "user", "allow_root_jobs": "no"})", "/etc/baton");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message,
             Catch::Contains("jobs_run_as: expected \"daemon\" (workers run as the daemon's user) "
                             "or \"submitter\""));
  CHECK_THAT(bad.error().message, Catch::Contains("allow_root_jobs: expected true or false"));
  CHECK_THAT(error_of(R"({"jobs_run_as": 1})"), Catch::Contains("jobs_run_as: expected"));
  CHECK_THAT(error_of(R"({"job_run_as": "daemon"})"),
             Catch::Contains("did you mean \"jobs_run_as\"?"));
}
