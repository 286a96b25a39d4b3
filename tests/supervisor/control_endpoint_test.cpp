#include "supervisor/control_endpoint.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "os/env.h"
#include "os/mem_env.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace os = baton::os;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string endpoint_token(64, 'c');

json good_doc() {
  return {{"version", 1},
          {"address", "127.0.0.1"},
          {"port", 50123},
          {"token", endpoint_token},
          {"pid", 42}};
}

std::string error_of(const std::string& text) {
  auto e = parse_control_endpoint(text);
  REQUIRE_FALSE(e);
  return e.error().message;
}

}  // namespace

TEST_CASE("the endpoint file round-trips", "[unit][control_endpoint]") {
  control_endpoint e;
  e.port = 65535;
  e.token = endpoint_token;
  e.pid = 7;
  const auto text = render_control_endpoint(e);
  CHECK(text.back() == '\n');
  auto back = parse_control_endpoint(text);
  REQUIRE(back);
  CHECK(*back == e);
  auto doc = parse_control_endpoint(good_doc().dump());
  REQUIRE(doc);
  CHECK(doc->port == 50123);
  CHECK(doc->pid == 42);
  CHECK(doc->address == "127.0.0.1");
}

TEST_CASE("every bad field is named, all at once", "[unit][control_endpoint]") {
  auto d = good_doc();
  d["port"] = 0;
  d["version"] = 2;
  d["address"] = "0.0.0.0";
  d["pid"] = -1;
  d["extra"] = true;
  const auto e = error_of(d.dump());
  CHECK_THAT(e, Catch::Contains("port: expected an integer from 1 to 65535, got 0"));
  CHECK_THAT(e, Catch::Contains("version: expected 1"));
  CHECK_THAT(e, Catch::Contains("address: expected \"127.0.0.1\""));
  CHECK_THAT(e, Catch::Contains("pid: expected a positive integer, got -1"));
  CHECK_THAT(e, Catch::Contains("extra: unknown key"));

  for (const json& port : {json(65536), json(-5), json("80"), json(80.5), json(nullptr)}) {
    auto p = good_doc();
    p["port"] = port;
    INFO(p.dump());
    CHECK_THAT(error_of(p.dump()), Catch::Contains("port: expected an integer from 1 to 65535"));
  }
  auto missing = good_doc();
  missing.erase("token");
  CHECK_THAT(error_of(missing.dump()), Catch::Contains("token: missing"));
}

TEST_CASE("a bad token is rejected without being echoed", "[unit][control_endpoint]") {
  for (const json& t : {json(std::string(63, 'c') + "Z"), json(std::string(62, 'c')), json(5)}) {
    auto d = good_doc();
    d["token"] = t;
    const auto e = error_of(d.dump());
    CHECK_THAT(e, Catch::Contains("token: expected 64 lowercase hex digits"));
    if (t.is_string()) CHECK_THAT(e, !Catch::Contains(t.get<std::string>()));
  }
}

TEST_CASE("hostile endpoint documents", "[unit][control_endpoint]") {
  CHECK_THAT(error_of("[1]"), Catch::Contains("expected an object"));
  CHECK_THAT(error_of("{\"port\": 1,"), Catch::Contains("byte"));
  CHECK_THAT(error_of(R"({"port": 1, "port": 2})"), Catch::Contains("duplicate key"));
  CHECK_THAT(error_of(std::string(5000, ' ') + "{}"), Catch::Contains("at most 4096"));
  CHECK_THAT(error_of(R"({"pid": [[[[[[1]]]]]]})"), Catch::Contains("deep"));
}

TEST_CASE("loading names the file", "[unit][control_endpoint]") {
  const auto dir = fs::temp_directory_path() / "baton-endpoint-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto file = dir / "control-endpoint.json";
  auto missing = load_control_endpoint(os::env::default_env(), file);
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message,
             Catch::Contains(file.string()) && Catch::Contains("(is `baton serve` running?)"));
  std::ofstream(file) << R"({"version": 1})";
  auto bad = load_control_endpoint(os::env::default_env(), file);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains(file.string() + ": port: missing"));
  std::ofstream(file, std::ios::trunc) << good_doc().dump();
  auto good = load_control_endpoint(os::env::default_env(), file);
  REQUIRE(good);
  CHECK(good->token == endpoint_token);
  fs::remove_all(dir);
}

TEST_CASE("loading goes through the env and stops at the size cap", "[unit][control_endpoint]") {
  os::mem_env env;
  const auto file = baton::test::abs_path("/mem/control-endpoint.json");
  REQUIRE(env.create_dirs(file.parent_path()));
  REQUIRE(os::write_file_atomic(env, file, good_doc().dump()));
  auto good = load_control_endpoint(env, file);
  REQUIRE(good);
  CHECK(good->token == endpoint_token);
  REQUIRE(os::write_file_atomic(env, file, std::string(1 << 20, ' ') + good_doc().dump()));
  auto huge = load_control_endpoint(env, file);
  REQUIRE_FALSE(huge);
  CHECK_THAT(huge.error().message, Catch::Contains("4097 bytes; at most 4096"));
}
