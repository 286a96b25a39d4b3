#include "supervisor/control_api.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

using namespace baton::supervisor;

namespace {

api_result<api_call> parse(std::string method, std::string target, std::string body = "") {
  return parse_api_request(
      api_request{std::move(method), std::move(target), std::move(body), 1000, 100, {27, 44}});
}

// The status and message of a rejected request, for exact comparisons.
api_error rejection(const api_result<api_call>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

void check_error(const api_result<api_call>& r, int status, const std::string& message) {
  const auto e = rejection(r);
  CHECK(e.status == status);
  CHECK(e.message == message);
}

// Absolute folders for base_dir: "/a" has no drive, so Windows calls it relative. generic_string()
// spells them with '/', which needs no escaping inside the JSON bodies.
const std::string home_jobs = std::filesystem::absolute("/home/a/jobs").generic_string();
const std::string dir_a = std::filesystem::absolute("/a").generic_string();

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("every route parses into its call", "[unit][control_api]") {
  SECTION("health") {
    auto r = parse("GET", "/v1/health");
    REQUIRE(r.has_value());
    CHECK(std::holds_alternative<health_call>(*r));
    CHECK(call_name(*r) == "health");
  }
  SECTION("list") {
    auto r = parse("GET", "/v1/jobs");
    REQUIRE(r.has_value());
    CHECK(std::holds_alternative<list_call>(*r));
  }
  SECTION("submit") {
    auto r =
        parse("POST", "/v1/jobs",
              R"({"spec": {"name": "mnist", "epochs": 3}, "base_dir": ")" + home_jobs + R"("})");
    REQUIRE(r.has_value());
    const auto& s = std::get<submit_call>(*r);
    CHECK(s.spec == nlohmann::json{{"name", "mnist"}, {"epochs", 3}});
    CHECK(s.base_dir == home_jobs);
    CHECK(s.peer_uid == 1000);
    CHECK(s.peer_gid == 100);
    CHECK(s.peer_groups == std::vector<std::uint32_t>{27, 44});
    CHECK_FALSE(s.path);
    CHECK(call_name(*r) == "submit");
    auto with_path = parse("POST", "/v1/jobs",
                           R"({"spec": {}, "base_dir": ")" + home_jobs +
                               R"(", "path": "/home/a/.pyenv/shims:/usr/bin"})");
    REQUIRE(with_path.has_value());
    CHECK(std::get<submit_call>(*with_path).path == "/home/a/.pyenv/shims:/usr/bin");
  }
  SECTION("status") {
    auto r = parse("GET", "/v1/jobs/mnist-2");
    REQUIRE(r.has_value());
    CHECK(std::get<status_call>(*r).id == "mnist-2");
  }
  SECTION("logs without and with an offset") {
    auto r = parse("GET", "/v1/jobs/a_b.c/logs");
    REQUIRE(r.has_value());
    CHECK(std::get<logs_call>(*r).id == "a_b.c");
    CHECK(std::get<logs_call>(*r).offset == 0);
    auto r2 = parse("GET", "/v1/jobs/a/logs?offset=18446744073709551615");
    REQUIRE(r2.has_value());
    CHECK(std::get<logs_call>(*r2).offset == 18446744073709551615ull);
  }
  SECTION("cancel, with no body or an empty object") {
    auto r = parse("POST", "/v1/jobs/x/cancel");
    REQUIRE(r.has_value());
    CHECK(std::get<cancel_call>(*r).id == "x");
    auto r2 = parse("POST", "/v1/jobs/x/cancel", " {} ");
    REQUIRE(r2.has_value());
    CHECK(std::holds_alternative<cancel_call>(*r2));
  }
  SECTION("resume, with no body or an empty object") {
    auto r = parse("POST", "/v1/jobs/y.1/resume");
    REQUIRE(r.has_value());
    CHECK(std::get<resume_call>(*r).id == "y.1");
    CHECK(call_name(*r) == "resume");
    auto r2 = parse("POST", "/v1/jobs/y/resume", "{}");
    REQUIRE(r2.has_value());
    CHECK(std::holds_alternative<resume_call>(*r2));
  }
}

TEST_CASE("unknown routes are 404 and wrong methods 405", "[unit][control_api]") {
  check_error(parse("GET", "/"), 404, "unknown route /");
  check_error(parse("GET", "/v2/jobs"), 404, "unknown route /v2/jobs");
  check_error(parse("GET", "/v1/job"), 404, "unknown route /v1/job");
  check_error(parse("GET", "/v1/jobs/a/stop"), 404, "unknown route /v1/jobs/a/stop");
  check_error(parse("GET", "/v1/jobs/a/logs/more"), 404, "unknown route /v1/jobs/a/logs/more");
  check_error(parse("DELETE", "/v1/jobs"), 405,
              "method DELETE not allowed on /v1/jobs (allowed: GET, POST)");
  check_error(parse("POST", "/v1/health"), 405,
              "method POST not allowed on /v1/health (allowed: GET)");
  check_error(parse("get", "/v1/health"), 405,
              "method get not allowed on /v1/health (allowed: GET)");
  check_error(parse("PUT", "/v1/jobs/a"), 405,
              "method PUT not allowed on /v1/jobs/a (allowed: GET, DELETE)");
  check_error(parse("POST", "/v1/jobs/a/logs"), 405,
              "method POST not allowed on /v1/jobs/a/logs (allowed: GET)");
  check_error(parse("GET", "/v1/jobs/a/cancel"), 405,
              "method GET not allowed on /v1/jobs/a/cancel (allowed: POST)");
  check_error(parse("GET", "/v1/jobs/a/resume"), 405,
              "method GET not allowed on /v1/jobs/a/resume (allowed: POST)");
}

TEST_CASE("targets must be origin-form paths", "[unit][control_api]") {
  check_error(parse("GET", "http://localhost/v1/jobs"), 400,
              "request target must be a path starting with '/', got 'http://localhost/v1/jobs'");
  check_error(parse("GET", ""), 400, "request target must be a path starting with '/', got ''");
}

TEST_CASE("job ids are checked character by character", "[unit][control_api]") {
  const std::string tail =
      "': expected 1 to 80 characters of A-Z a-z 0-9 . _ - not starting with '.'";
  check_error(parse("GET", "/v1/jobs/.hidden"), 400, "invalid job id '.hidden" + tail);
  check_error(parse("GET", "/v1/jobs/.."), 400, "invalid job id '.." + tail);
  check_error(parse("GET", "/v1/jobs/a%2Fb"), 400, "invalid job id 'a%2Fb" + tail);
  check_error(parse("GET", "/v1/jobs/a b/logs"), 400, "invalid job id 'a b" + tail);
  check_error(parse("POST", "/v1/jobs//cancel"), 400, "invalid job id '" + tail);
  check_error(parse("GET", "/v1/jobs/"), 400, "invalid job id '" + tail);
  const std::string id80(80, 'a');
  CHECK(parse("GET", "/v1/jobs/" + id80).has_value());
  check_error(parse("GET", "/v1/jobs/" + id80 + "a"), 400, "invalid job id '" + id80 + "a" + tail);
  CHECK(is_valid_job_id("A-z_0.9"));
  CHECK_FALSE(is_valid_job_id("é"));
}

TEST_CASE("query parameters: only offset, only on logs", "[unit][control_api]") {
  const std::string tail = "': expected a non-negative integer (bytes into the log)";
  check_error(parse("GET", "/v1/jobs/a/logs?offset=abc"), 400, "bad offset 'abc" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset=-1"), 400, "bad offset '-1" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset="), 400, "bad offset '" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset"), 400, "bad offset '" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset=12x"), 400, "bad offset '12x" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset=18446744073709551616"), 400,
              "bad offset '18446744073709551616" + tail);
  check_error(parse("GET", "/v1/jobs/a/logs?offset=1&offset=2"), 400,
              "query parameter 'offset' given twice");
  check_error(parse("GET", "/v1/jobs/a/logs?follow=1"), 400,
              "unknown query parameter 'follow' for /v1/jobs/a/logs");
  check_error(parse("GET", "/v1/jobs?offset=1"), 400,
              "unknown query parameter 'offset' for /v1/jobs");
  CHECK(parse("GET", "/v1/jobs?").has_value());
}

TEST_CASE("history: a since cursor, and a bad one is a 400 naming it", "[unit][control_api]") {
  auto r = parse("GET", "/v1/jobs/leaky-1/history");
  REQUIRE(r.has_value());
  CHECK(std::get<history_call>(*r).id == "leaky-1");
  CHECK(std::get<history_call>(*r).since == 0);
  CHECK(call_name(*r) == "history");
  r = parse("GET", "/v1/jobs/leaky-1/history?since=9223372036854775807");
  REQUIRE(r.has_value());
  CHECK(std::get<history_call>(*r).since == 9223372036854775807);

  const std::string tail = "': expected a non-negative integer (the 'next' of the previous answer)";
  check_error(parse("GET", "/v1/jobs/a/history?since=-1"), 400, "bad since '-1" + tail);
  check_error(parse("GET", "/v1/jobs/a/history?since=x"), 400, "bad since 'x" + tail);
  check_error(parse("GET", "/v1/jobs/a/history?since="), 400, "bad since '" + tail);
  check_error(parse("GET", "/v1/jobs/a/history?since=9223372036854775808"), 400,
              "bad since '9223372036854775808" + tail);
  check_error(parse("GET", "/v1/jobs/a/history?since=1&since=2"), 400,
              "query parameter 'since' given twice");
  check_error(parse("GET", "/v1/jobs/a/history?offset=1"), 400,
              "unknown query parameter 'offset' for /v1/jobs/a/history");
  check_error(parse("POST", "/v1/jobs/a/history"), 405,
              "method POST not allowed on /v1/jobs/a/history (allowed: GET)");
  check_error(parse("GET", "/v1/jobs/.a/history"), 400,
              "invalid job id '.a': expected 1 to 80 characters of A-Z a-z 0-9 . _ - not "
              "starting with '.'");
}

TEST_CASE("metrics: GET /metrics, unversioned, no query", "[unit][control_api]") {
  auto r = parse("GET", "/metrics");
  REQUIRE(r.has_value());
  CHECK(std::holds_alternative<metrics_call>(*r));
  CHECK(call_name(*r) == "metrics");
  check_error(parse("POST", "/metrics"), 405, "method POST not allowed on /metrics (allowed: GET)");
  check_error(parse("GET", "/metrics?x=1"), 400, "unknown query parameter 'x' for /metrics");
  check_error(parse("GET", "/v1/metrics"), 404, "unknown route /v1/metrics");
}

TEST_CASE("bodies: GET takes none, cancel takes an empty object at most", "[unit][control_api]") {
  check_error(parse("GET", "/v1/jobs", "{}"), 400, "GET /v1/jobs takes no request body");
  check_error(parse("POST", "/v1/jobs/a/cancel", R"({"force": true})"), 400,
              "POST /v1/jobs/a/cancel takes no request body (or an empty object)");
  check_error(parse("POST", "/v1/jobs/a/cancel", "{"), 400,
              "malformed JSON at byte 1: syntax error while parsing object key - unexpected end "
              "of input; expected string literal");
}

TEST_CASE("submit bodies are validated field by field", "[unit][control_api]") {
  check_error(
      parse("POST", "/v1/jobs"), 400,
      R"(empty request body: POST /v1/jobs expects {"spec": {...}, "base_dir": "/abs/dir"})");
  check_error(parse("POST", "/v1/jobs", "[1]"), 400,
              "request body must be a JSON object, got an array");
  check_error(parse("POST", "/v1/jobs", R"({"base_dir": "/a"})"), 400, "missing field 'spec'");
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}})"), 400, "missing field 'base_dir'");
  check_error(parse("POST", "/v1/jobs", R"({"spec": "job.json", "base_dir": "/a"})"), 400,
              "field 'spec' must be an object, got a string");
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}, "base_dir": 7})"), 400,
              "field 'base_dir' must be a string, got a number");
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}, "base_dir": "jobs"})"), 400,
              "field 'base_dir' must be an absolute path, got 'jobs'");
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}, "base_dir": "/a", "prio": 1})"), 400,
              "unknown field 'prio' in request body (expected spec, base_dir, path)");
  check_error(parse("POST", "/v1/jobs",
                    R"({"spec": {}, "base_dir": ")" + dir_a + R"(", "path": ["/bin"]})"),
              400, "field 'path' must be a string, got an array");
  check_error(parse("POST", "/v1/jobs",
                    R"({"spec": {}, "base_dir": ")" + dir_a + R"(", "path": "/bin\u0000x"})"),
              400, "field 'path' must not contain a NUL byte (at byte 4)");
  check_error(parse("POST", "/v1/jobs",
                    R"({"spec": {}, "base_dir": ")" + dir_a + R"(", "path": ")" +
                        std::string(32769, 'p') + R"("})"),
              400, "field 'path' is 32769 bytes; at most 32768");
}

TEST_CASE("malformed JSON is reported with its byte offset", "[unit][control_api]") {
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}, "base_dir": "/a",})"), 400,
              "malformed JSON at byte 30: syntax error while parsing object key - unexpected '}'; "
              "expected string literal");
  check_error(parse("POST", "/v1/jobs", R"({"spec": tru})"), 400,
              "malformed JSON at byte 12: syntax error while parsing value - invalid literal; "
              "last read: '\"spec\": tru}'");
  check_error(parse("POST", "/v1/jobs", R"({"spec": {}, "base_dir": "/a"} x)"), 400,
              "malformed JSON at byte 31: syntax error while parsing value - invalid literal; "
              "last read: '\"/a\"} x'; expected end of input");
  check_error(parse("POST", "/v1/jobs", "{\"spec\": {}, \"base_dir\": \"/\xff\"}"), 400,
              "malformed JSON at byte 27: syntax error while parsing value - invalid string: "
              "ill-formed UTF-8 byte; last read: '\"/\\xff'");
}

TEST_CASE("duplicate keys are rejected instead of picking one", "[unit][control_api]") {
  check_error(parse("POST", "/v1/jobs", R"({"spec": {"a": 1, "a": 2}, "base_dir": "/a"})"), 400,
              "duplicate key \"a\" in JSON body");
  // The same key in sibling objects is fine.
  CHECK(parse("POST", "/v1/jobs",
              R"({"spec": {"x": {"a": 1}, "y": {"a": 2}}, "base_dir": ")" + dir_a + R"("})")
            .has_value());
}

TEST_CASE("nesting is limited to 64 levels without deep recursion", "[unit][control_api]") {
  CHECK(parse_json_limited(nested(64)).has_value());
  const auto e = parse_json_limited(nested(65));
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().status == 400);
  CHECK(e.error().message == "JSON nested deeper than 64 levels");
  // A megabyte of brackets: recursion per level would overflow the stack here.
  const std::string deep(max_request_body_bytes, '[');
  check_error(parse("POST", "/v1/jobs", deep), 400, "JSON nested deeper than 64 levels");
  const std::string spec_deep = R"({"spec": )" + nested(64) + R"(, "base_dir": "/a"})";
  check_error(parse("POST", "/v1/jobs", spec_deep), 400, "JSON nested deeper than 64 levels");
}

TEST_CASE("bodies over 1 MiB are 413 before anything else", "[unit][control_api]") {
  const std::string big(max_request_body_bytes + 1, ' ');
  check_error(parse("POST", "/v1/nowhere", big), 413,
              "request body is 1048577 bytes; the limit is 1048576");
  CHECK(parse("POST", "/v1/jobs/a/cancel", std::string(max_request_body_bytes, ' ')).has_value());
}

TEST_CASE("error responses are JSON objects with an error field", "[unit][control_api]") {
  const auto r = error_response(api_error{404, "unknown route /x"});
  CHECK(r.status == 404);
  CHECK(r.body == nlohmann::json{{"error", "unknown route /x"}});
}

// Found with fuzz_api_request's UTF-8 invariant: method, target and JSON errors echoed raw bytes,
// so an answer could carry invalid UTF-8 and control characters. They are shown as \xNN.
TEST_CASE("raw bytes of a request are quoted as hex escapes in errors", "[unit][control_api]") {
  check_error(parse("G\xffT", "/v1/health"), 405,
              "method G\\xffT not allowed on /v1/health (allowed: GET)");
  check_error(parse("GET", "/v1/jobs/a\x01\xc3\xa9"), 400,
              "invalid job id 'a\\x01\\xc3\\xa9': expected 1 to 80 characters of A-Z a-z 0-9 . _ - "
              "not starting with '.'");
  check_error(parse("GET", "/v\xfe"), 404, "unknown route /v\\xfe");
  check_error(parse("GET", "v1\n"), 400,
              "request target must be a path starting with '/', got 'v1\\x0a'");
}

TEST_CASE("remove and prune parse with their options, and refuse bad ones", "[unit][control_api]") {
  auto rm = parse("DELETE", "/v1/jobs/a-1");
  REQUIRE(rm.has_value());
  CHECK(std::get<remove_call>(*rm).id == "a-1");
  CHECK_FALSE(std::get<remove_call>(*rm).force);
  CHECK(call_name(*rm) == "remove");
  auto forced = parse("DELETE", "/v1/jobs/a-1?force=true");
  REQUIRE(forced.has_value());
  CHECK(std::get<remove_call>(*forced).force);
  CHECK(parse("DELETE", "/v1/jobs/a-1?force=yes").error().message ==
        "bad force 'yes': expected true or false");
  CHECK(parse("GET", "/v1/jobs/a-1?force=true").error().status == 400);
  CHECK(parse("DELETE", "/v1/jobs").error().status == 405);
  CHECK(parse("DELETE", "/v1/jobs/.x").error().status == 400);

  auto all = parse("POST", "/v1/prune");
  REQUIRE(all.has_value());
  const auto& p = std::get<prune_call>(*all);
  CHECK_FALSE(p.older_than_ms);
  CHECK(p.states == std::vector<std::string>{"completed", "failed", "cancelled"});
  CHECK_FALSE(p.dry_run);
  CHECK(call_name(*all) == "prune");
  auto some = parse("POST", "/v1/prune",
                    R"({"older_than_ms": 86400000, "states": ["failed"], "dry_run": true})");
  REQUIRE(some.has_value());
  CHECK(std::get<prune_call>(*some).older_than_ms == 86400000);
  CHECK(std::get<prune_call>(*some).states == std::vector<std::string>{"failed"});
  CHECK(std::get<prune_call>(*some).dry_run);
  CHECK(parse("POST", "/v1/prune", R"({"states": ["running"]})").error().message ==
        "field 'states': 'running' is not a finished state (completed, failed, cancelled)");
  CHECK(parse("POST", "/v1/prune", R"({"older_than_ms": -1})").error().status == 400);
  CHECK(parse("POST", "/v1/prune", R"({"dry_run": 1})").error().status == 400);
  CHECK(parse("POST", "/v1/prune", R"({"age": 1})").error().message ==
        "unknown field 'age' in request body (expected older_than_ms, states, dry_run)");
  CHECK(parse("GET", "/v1/prune").error().status == 405);
}

TEST_CASE("the dashboard's URL is a GET on the control API", "[unit][control_api]") {
  auto r = parse("GET", "/v1/dashboard");
  REQUIRE(r.has_value());
  CHECK(std::holds_alternative<dashboard_call>(*r));
  CHECK(call_name(*r) == "dashboard");
  CHECK(parse("POST", "/v1/dashboard").error().status == 405);
  CHECK(parse("GET", "/v1/dashboard?x=1").error().status == 400);
}
