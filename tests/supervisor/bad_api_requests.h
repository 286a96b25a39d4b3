// The table of malformed control API requests with the exact status and message each must get.
// bad_api_requests_test.cpp checks them against parse_api_request; a live-daemon test can send the
// same rows over the socket and expect the same answers. Rows are data only; no I/O here.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace baton::supervisor::testing {

struct bad_api_request {
  const char* what;  // why the request is bad, for test output
  std::string method;
  std::string target;
  std::string body;
  int status;
  std::string message;
};

inline std::string nested_arrays(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') +
         std::string(static_cast<std::size_t>(depth), ']');
}

inline std::vector<bad_api_request> bad_api_requests() {
  const std::string id_rule =
      "': expected 1 to 80 characters of A-Z a-z 0-9 . _ - not starting with '.'";
  const std::string offset_rule = "': expected a non-negative integer (bytes into the log)";
  const std::string submit_usage =
      "empty request body: POST /v1/jobs expects {\"spec\": {...}, \"base_dir\": \"/abs/dir\"}";
  const std::string spec = R"("spec": {"name": "t"})";
  return {
      // Targets and routes.
      {"empty target", "GET", "", "", 400,
       "request target must be a path starting with '/', got ''"},
      {"relative target", "GET", "v1/health", "", 400,
       "request target must be a path starting with '/', got 'v1/health'"},
      {"absolute-form target", "GET", "http://localhost/v1/health", "", 400,
       "request target must be a path starting with '/', got 'http://localhost/v1/health'"},
      {"root", "GET", "/", "", 404, "unknown route /"},
      {"unknown version", "GET", "/v2/jobs", "", 404, "unknown route /v2/jobs"},
      {"too many segments", "GET", "/v1/jobs/a/logs/b", "", 404, "unknown route /v1/jobs/a/logs/b"},
      {"trailing slash", "GET", "/v1/jobs/a/logs/", "", 404, "unknown route /v1/jobs/a/logs/"},
      {"empty segment", "GET", "/v1//jobs", "", 404, "unknown route /v1//jobs"},
      // Methods.
      {"DELETE on the job list", "DELETE", "/v1/jobs", "", 405,
       "method DELETE not allowed on /v1/jobs (allowed: GET, POST)"},
      {"DELETE with a body", "DELETE", "/v1/jobs/abc", "{}", 400,
       "DELETE /v1/jobs/abc takes no request body"},
      {"prune with a bad state", "POST", "/v1/prune", "{\"states\": [\"running\"]}", 400,
       "field 'states': 'running' is not a finished state (completed, failed, cancelled)"},
      {"lower-case method", "get", "/v1/health", "", 405,
       "method get not allowed on /v1/health (allowed: GET)"},
      {"PUT on jobs", "PUT", "/v1/jobs", "", 405,
       "method PUT not allowed on /v1/jobs (allowed: GET, POST)"},
      {"GET on cancel", "GET", "/v1/jobs/abc/cancel", "", 405,
       "method GET not allowed on /v1/jobs/abc/cancel (allowed: POST)"},
      {"POST on health", "POST", "/v1/health", "{}", 405,
       "method POST not allowed on /v1/health (allowed: GET)"},
      // Job ids.
      {"hidden id", "GET", "/v1/jobs/.hidden", "", 400, "invalid job id '.hidden" + id_rule},
      {"id too long", "GET", "/v1/jobs/" + std::string(81, 'x'), "", 400,
       "invalid job id '" + std::string(81, 'x') + id_rule},
      {"percent-encoded id", "GET", "/v1/jobs/a%20b", "", 400, "invalid job id 'a%20b" + id_rule},
      {"empty id", "GET", "/v1/jobs//logs", "", 400, "invalid job id '" + id_rule},
      {"dot-dot id", "POST", "/v1/jobs/../cancel", "", 400, "invalid job id '.." + id_rule},
      // Query strings.
      {"negative offset", "GET", "/v1/jobs/a/logs?offset=-1", "", 400,
       "bad offset '-1" + offset_rule},
      {"empty offset", "GET", "/v1/jobs/a/logs?offset=", "", 400, "bad offset '" + offset_rule},
      {"offset without value", "GET", "/v1/jobs/a/logs?offset", "", 400,
       "bad offset '" + offset_rule},
      {"offset past 64 bits", "GET", "/v1/jobs/a/logs?offset=18446744073709551616", "", 400,
       "bad offset '18446744073709551616" + offset_rule},
      {"offset with suffix", "GET", "/v1/jobs/a/logs?offset=10kb", "", 400,
       "bad offset '10kb" + offset_rule},
      {"offset twice", "GET", "/v1/jobs/a/logs?offset=1&offset=2", "", 400,
       "query parameter 'offset' given twice"},
      {"unknown parameter", "GET", "/v1/jobs/a/logs?limit=5", "", 400,
       "unknown query parameter 'limit' for /v1/jobs/a/logs"},
      {"query on a route without one", "GET", "/v1/jobs?offset=3", "", 400,
       "unknown query parameter 'offset' for /v1/jobs"},
      // Bodies where none belongs.
      {"GET with a body", "GET", "/v1/health", "{}", 400, "GET /v1/health takes no request body"},
      {"cancel with fields", "POST", "/v1/jobs/a/cancel", R"({"force": true})", 400,
       "POST /v1/jobs/a/cancel takes no request body (or an empty object)"},
      {"cancel with an array", "POST", "/v1/jobs/a/cancel", "[]", 400,
       "POST /v1/jobs/a/cancel takes no request body (or an empty object)"},
      {"resume with fields", "POST", "/v1/jobs/a/resume", R"({"from_step": 3})", 400,
       "POST /v1/jobs/a/resume takes no request body (or an empty object)"},
      {"resume of a bad id", "POST", "/v1/jobs/.x/resume", "", 400, "invalid job id '.x" + id_rule},
      {"cancel with broken JSON", "POST", "/v1/jobs/a/cancel", "{", 400,
       "malformed JSON at byte 1: syntax error while parsing object key - unexpected end of input; "
       "expected string literal"},
      // Submit bodies.
      {"empty submit", "POST", "/v1/jobs", "", 400, submit_usage},
      {"blank submit", "POST", "/v1/jobs", " \r\n\t", 400, submit_usage},
      {"truncated JSON", "POST", "/v1/jobs", R"({"spec": {"name": "t"})", 400,
       "malformed JSON at byte 22: syntax error while parsing object - unexpected end of input; "
       "expected '}'"},
      {"trailing comma", "POST", "/v1/jobs", R"({"spec": {}, "base_dir": "/a",})", 400,
       "malformed JSON at byte 30: syntax error while parsing object key - unexpected '}'; "
       "expected string literal"},
      {"two documents", "POST", "/v1/jobs", R"({"spec": {}, "base_dir": "/a"} {})", 400,
       "malformed JSON at byte 31: syntax error while parsing value - unexpected '{'; expected end "
       "of input"},
      {"NaN in body", "POST", "/v1/jobs", R"({"spec": {"x": NaN}, "base_dir": "/a"})", 400,
       "malformed JSON at byte 15: syntax error while parsing value - invalid literal; last read: "
       "'\"x\": N'"},
      {"invalid UTF-8", "POST", "/v1/jobs", "{\"spec\": {\"n\": \"\xff\"}, \"base_dir\": \"/a\"}",
       400,
       "malformed JSON at byte 16: syntax error while parsing value - invalid string: ill-formed "
       "UTF-8 byte; last read: '\"\\xff'"},
      {"array body", "POST", "/v1/jobs", "[]", 400,
       "request body must be a JSON object, got an array"},
      {"string body", "POST", "/v1/jobs", R"("spec")", 400,
       "request body must be a JSON object, got a string"},
      {"unknown field", "POST", "/v1/jobs", "{" + spec + R"(, "base_dir": "/a", "user": 0})", 400,
       "unknown field 'user' in request body (expected spec, base_dir, path)"},
      {"path not a string", "POST", "/v1/jobs",
       "{" + spec + R"(, "base_dir": ")" + std::filesystem::absolute("/a").generic_string() +
           R"(", "path": 1})",
       400, "field 'path' must be a string, got a number"},
      {"missing spec", "POST", "/v1/jobs", R"({"base_dir": "/a"})", 400, "missing field 'spec'"},
      {"spec not an object", "POST", "/v1/jobs", R"({"spec": "job.json", "base_dir": "/a"})", 400,
       "field 'spec' must be an object, got a string"},
      {"missing base_dir", "POST", "/v1/jobs", "{" + spec + "}", 400, "missing field 'base_dir'"},
      {"base_dir not a string", "POST", "/v1/jobs", "{" + spec + R"(, "base_dir": ["/a"]})", 400,
       "field 'base_dir' must be a string, got an array"},
      {"relative base_dir", "POST", "/v1/jobs", "{" + spec + R"(, "base_dir": "jobs/x"})", 400,
       "field 'base_dir' must be an absolute path, got 'jobs/x'"},
      {"duplicate key in spec", "POST", "/v1/jobs",
       R"({"spec": {"name": "a", "name": "b"}, "base_dir": "/a"})", 400,
       "duplicate key \"name\" in JSON body"},
      {"nested too deep", "POST", "/v1/jobs",
       R"({"spec": {"x": )" + nested_arrays(63) + R"(}, "base_dir": "/a"})", 400,
       "JSON nested deeper than 64 levels"},
      {"body over the limit", "POST", "/v1/jobs", std::string((1 << 20) + 1, ' '), 413,
       "request body is 1048577 bytes; the limit is 1048576"},
  };
}

}  // namespace baton::supervisor::testing
