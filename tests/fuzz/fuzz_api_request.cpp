// Fuzzes the control API's request router, supervisor::parse_api_request, and its JSON reader.
// Input layout: method '\n' target '\n' body (missing parts are empty), so the seeds in
// corpus/fuzz_api_request/ read like the requests they stand for.
// Invariants: no throw or crash; a rejection has a status the API documents (400, 404, 405, 413)
// and a valid UTF-8 message; an accepted call agrees with the request (method, route, a valid job
// id, an object spec with an absolute base_dir); parse_json_limited round-trips what it accepts.
#include <string>
#include <variant>

#include "supervisor/control_api.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace baton::supervisor;

std::string take_line(std::string_view& rest) {
  const auto nl = rest.find('\n');
  std::string out(rest.substr(0, nl));
  rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  return out;
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

void check_json_reader(const std::string& body) {
  auto doc = parse_json_limited(body);
  if (!doc) {
    BATON_FUZZ_CHECK(doc.error().status == 400, doc.error().message);
    BATON_FUZZ_CHECK(!doc.error().message.empty(), "empty error message");
    BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(doc.error().message), doc.error().message);
    return;
  }
  // Accepted JSON came from valid UTF-8 text, so a strict dump cannot fail.
  const std::string dumped = doc->dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  auto again = parse_json_limited(dumped);
  BATON_FUZZ_CHECK(again.has_value(), "re-dumped JSON rejected: " + again.error().message);
  BATON_FUZZ_CHECK(*again == *doc, "JSON round trip changed the document: " + dumped);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view rest = baton::fuzz::as_text(data, size);
  api_request req;
  req.method = take_line(rest);
  req.target = take_line(rest);
  req.body = std::string(rest);
  req.peer_uid = 1000;

  check_json_reader(req.body);

  auto call = parse_api_request(req);
  if (!call) {
    const api_error& e = call.error();
    BATON_FUZZ_CHECK(e.status == 400 || e.status == 404 || e.status == 405 || e.status == 413,
                     std::to_string(e.status) + " " + e.message);
    BATON_FUZZ_CHECK(!e.message.empty(), "empty error message");
    BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(e.message), e.message);
    BATON_FUZZ_CHECK((e.status == 413) == (req.body.size() > max_request_body_bytes),
                     std::to_string(e.status) + " " + e.message);
    // What the session writes back; replace mode, as control_session does, so it cannot throw.
    (void)error_response(e).body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return 0;
  }

  BATON_FUZZ_CHECK(!call_name(*call).empty(), "call without a name");
  const std::string path = path_of(req.target);
  const auto check_id = [&](const std::string& id) {
    BATON_FUZZ_CHECK(is_valid_job_id(id), "accepted invalid job id '" + id + "'");
    BATON_FUZZ_CHECK(path.find("/" + id) != std::string::npos, "id not in target: " + id);
  };
  std::visit(
      [&](const auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, submit_call>) {
          BATON_FUZZ_CHECK(req.method == "POST" && path == "/v1/jobs", req.method + " " + path);
          BATON_FUZZ_CHECK(c.spec.is_object(), "submit spec is not an object");
          BATON_FUZZ_CHECK(!c.base_dir.empty() && c.base_dir.front() == '/', c.base_dir);
          BATON_FUZZ_CHECK(c.peer_uid == req.peer_uid, "peer uid lost");
          BATON_FUZZ_CHECK(!c.path || (c.path->find('\0') == std::string::npos &&
                                       c.path->size() <= max_submit_path_bytes),
                           "submit path with a NUL or over the limit accepted");
        } else if constexpr (std::is_same_v<T, list_call>) {
          BATON_FUZZ_CHECK(req.method == "GET" && path == "/v1/jobs", req.method + " " + path);
          BATON_FUZZ_CHECK(req.body.empty(), "GET with a body accepted");
        } else if constexpr (std::is_same_v<T, health_call>) {
          BATON_FUZZ_CHECK(req.method == "GET" && path == "/v1/health", req.method + " " + path);
        } else if constexpr (std::is_same_v<T, status_call>) {
          BATON_FUZZ_CHECK(req.method == "GET", req.method);
          check_id(c.id);
        } else if constexpr (std::is_same_v<T, logs_call>) {
          BATON_FUZZ_CHECK(req.method == "GET", req.method);
          check_id(c.id);
          BATON_FUZZ_CHECK(path.ends_with("/logs"), path);
        } else if constexpr (std::is_same_v<T, resume_call>) {
          BATON_FUZZ_CHECK(req.method == "POST", req.method);
          check_id(c.id);
          BATON_FUZZ_CHECK(path.ends_with("/resume"), path);
        } else if constexpr (std::is_same_v<T, history_call>) {
          BATON_FUZZ_CHECK(req.method == "GET", req.method);
          check_id(c.id);
          BATON_FUZZ_CHECK(path.ends_with("/history"), path);
          BATON_FUZZ_CHECK(c.since >= 0, "negative since accepted");
        } else if constexpr (std::is_same_v<T, metrics_call>) {
          BATON_FUZZ_CHECK(req.method == "GET" && path == "/metrics", req.method + " " + path);
        } else if constexpr (std::is_same_v<T, remove_call>) {
          BATON_FUZZ_CHECK(req.method == "DELETE", req.method);
          BATON_FUZZ_CHECK(req.body.empty(), "DELETE with a body accepted");
          check_id(c.id);
        } else if constexpr (std::is_same_v<T, dashboard_call>) {
          BATON_FUZZ_CHECK(req.method == "GET" && path == "/v1/dashboard", req.method + " " + path);
        } else if constexpr (std::is_same_v<T, prune_call>) {
          BATON_FUZZ_CHECK(req.method == "POST" && path == "/v1/prune", req.method + " " + path);
          BATON_FUZZ_CHECK(!c.states.empty(), "prune with no states");
          for (const auto& s : c.states) {
            BATON_FUZZ_CHECK(s == "completed" || s == "failed" || s == "cancelled", s);
          }
          BATON_FUZZ_CHECK(!c.older_than_ms || *c.older_than_ms >= 0, "negative age accepted");
        } else {
          static_assert(std::is_same_v<T, cancel_call>);
          BATON_FUZZ_CHECK(req.method == "POST", req.method);
          check_id(c.id);
          BATON_FUZZ_CHECK(path.ends_with("/cancel"), path);
        }
      },
      *call);
  return 0;
}
