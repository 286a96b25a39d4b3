#include "supervisor/control_api.h"

#include <charconv>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "base/status.h"
#include "protocol/json_parse.h"

namespace baton::supervisor {

api_handler::~api_handler() = default;

api_response api_handler::handle(const api_call& call, const api_caller& caller) {
  if (caller.privileged) return handle(call);
  return error_response(403, "permission denied: uid " + std::to_string(caller.uid) +
                                 " may not use this server (it serves its owner only)");
}

void throw_exception_from_error(const api_error& e, const boost::source_location&) {
  throw error_exception(make_error(std::to_string(e.status) + " " + e.message));
}

api_response error_response(int status, std::string message) {
  return api_response{status, nlohmann::json{{"error", std::move(message)}}};
}

api_response error_response(const api_error& e) { return error_response(e.status, e.message); }

bool is_valid_job_id(std::string_view id) {
  if (id.empty() || id.size() > 80 || id.front() == '.') return false;
  for (char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string_view call_name(const api_call& call) {
  static constexpr std::string_view names[] = {"submit",  "list",   "status", "logs",
                                               "cancel",  "resume", "health", "history",
                                               "metrics", "remove", "prune",  "dashboard"};
  static_assert(std::size(names) == std::variant_size_v<api_call>);
  return names[call.index()];
}

namespace {

using protocol::printable;

api_error bad_request(std::string message) { return api_error{400, std::move(message)}; }

std::string_view json_type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "binary data";
  }
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The resources of the API; `id` is filled for the per-job ones.
enum class route {
  health,
  jobs,
  job,
  job_logs,
  job_cancel,
  job_resume,
  job_history,
  metrics,
  prune,
  dashboard
};

struct matched_route {
  route r;
  std::string_view id;
};

std::optional<matched_route> match_route(std::string_view path) {
  // Unversioned, where every Prometheus scraper looks by default.
  if (path == "/metrics") return matched_route{route::metrics, {}};
  const auto seg = split(path.substr(1), '/');
  if (seg.empty() || seg[0] != "v1") return std::nullopt;
  if (seg.size() == 2 && seg[1] == "health") return matched_route{route::health, {}};
  if (seg.size() == 2 && seg[1] == "prune") return matched_route{route::prune, {}};
  if (seg.size() == 2 && seg[1] == "dashboard") return matched_route{route::dashboard, {}};
  if (seg.size() < 2 || seg[1] != "jobs") return std::nullopt;
  if (seg.size() == 2) return matched_route{route::jobs, {}};
  if (seg.size() == 3) return matched_route{route::job, seg[2]};
  if (seg.size() == 4 && seg[3] == "logs") return matched_route{route::job_logs, seg[2]};
  if (seg.size() == 4 && seg[3] == "cancel") return matched_route{route::job_cancel, seg[2]};
  if (seg.size() == 4 && seg[3] == "resume") return matched_route{route::job_resume, seg[2]};
  if (seg.size() == 4 && seg[3] == "history") return matched_route{route::job_history, seg[2]};
  return std::nullopt;
}

std::string_view allowed_methods(route r) {
  switch (r) {
    case route::jobs:
      return "GET, POST";
    case route::job_cancel:
    case route::job_resume:
    case route::prune:
      return "POST";
    case route::job:
      return "GET, DELETE";
    default:
      return "GET";
  }
}

api_result<std::uint64_t> parse_offset(std::string_view text) {
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return bad_request("bad offset '" + printable(text) +
                       "': expected a non-negative integer (bytes into the log)");
  }
  return value;
}

// A history cursor: the newest seq the client has, a non-negative int64.
api_result<std::uint64_t> parse_since(std::string_view text) {
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end ||
      value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return bad_request("bad since '" + printable(text) +
                       "': expected a non-negative integer (the 'next' of the previous answer)");
  }
  return value;
}

// Query parameters: `offset` on the logs route, `since` on the history route, nothing else;
// anything else is a client bug worth reporting rather than ignoring.
api_result<std::uint64_t> parse_query(std::string_view query, route r, std::string_view path) {
  std::optional<std::uint64_t> value_seen;
  if (query.empty()) return 0;
  const std::string_view wanted = r == route::job_logs      ? "offset"
                                  : r == route::job_history ? "since"
                                  : r == route::job         ? "force"
                                                            : "";
  for (const auto param : split(query, '&')) {
    if (param.empty()) continue;
    const auto eq = param.find('=');
    const auto key = param.substr(0, eq);
    const auto value = eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
    if (wanted.empty() || key != wanted) {
      return bad_request("unknown query parameter '" + printable(key) + "' for " + printable(path));
    }
    if (value_seen) return bad_request("query parameter '" + std::string(wanted) + "' given twice");
    if (r == route::job) {
      if (value != "true" && value != "false") {
        return bad_request("bad force '" + printable(value) + "': expected true or false");
      }
      value_seen = value == "true" ? 1 : 0;
    } else if (r == route::job_history) {
      auto v = parse_since(value);
      if (!v) return v.error();
      value_seen = *v;
    } else {
      auto v = parse_offset(value);
      if (!v) return v.error();
      value_seen = *v;
    }
  }
  return value_seen.value_or(0);
}

// A body that must be a JSON object (the submit and prune bodies).
api_result<nlohmann::json> parse_object_body(const api_request& request) {
  auto doc = parse_json_limited(request.body);
  if (!doc) return doc.error();
  if (!doc->is_object()) {
    return bad_request("request body must be a JSON object, got " +
                       std::string(json_type_name(*doc)));
  }
  return doc;
}

api_result<api_call> parse_submit(const api_request& request) {
  if (is_blank(request.body)) {
    return bad_request(
        "empty request body: POST /v1/jobs expects {\"spec\": {...}, \"base_dir\": \"/abs/dir\"}");
  }
  auto doc = parse_object_body(request);
  if (!doc) return doc.error();
  for (const auto& [key, value] : doc->items()) {
    if (key != "spec" && key != "base_dir" && key != "path") {
      return bad_request("unknown field '" + key +
                         "' in request body (expected spec, base_dir, path)");
    }
  }
  const auto spec = doc->find("spec");
  if (spec == doc->end()) return bad_request("missing field 'spec'");
  if (!spec->is_object()) {
    return bad_request("field 'spec' must be an object, got " + std::string(json_type_name(*spec)));
  }
  const auto base = doc->find("base_dir");
  if (base == doc->end()) return bad_request("missing field 'base_dir'");
  if (!base->is_string()) {
    return bad_request("field 'base_dir' must be a string, got " +
                       std::string(json_type_name(*base)));
  }
  auto base_dir = base->get<std::string>();
  if (!std::filesystem::path(base_dir).is_absolute()) {
    return bad_request("field 'base_dir' must be an absolute path, got '" + base_dir + "'");
  }
  std::optional<std::string> path;
  if (const auto p = doc->find("path"); p != doc->end()) {
    if (!p->is_string()) {
      return bad_request("field 'path' must be a string, got " + std::string(json_type_name(*p)));
    }
    path = p->get<std::string>();
    // A PATH a shell would accept: an environment entry, so no NUL, and of an environment's size.
    if (path->find('\0') != std::string::npos) {
      return bad_request("field 'path' must not contain a NUL byte (at byte " +
                         std::to_string(path->find('\0')) + ")");
    }
    if (path->size() > max_submit_path_bytes) {
      return bad_request("field 'path' is " + std::to_string(path->size()) + " bytes; at most " +
                         std::to_string(max_submit_path_bytes));
    }
  }
  return submit_call{std::move(*spec), std::move(base_dir), request.peer_uid,
                     request.peer_gid, request.peer_groups, std::move(path)};
}

api_result<api_call> parse_prune(const api_request& request) {
  prune_call c;
  if (is_blank(request.body)) return c;
  auto doc = parse_object_body(request);
  if (!doc) return doc.error();
  for (const auto& [key, value] : doc->items()) {
    if (key == "older_than_ms") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0) {
        return bad_request("field 'older_than_ms' must be a non-negative integer, got " +
                           std::string(json_type_name(value)));
      }
      c.older_than_ms = value.get<std::int64_t>();
    } else if (key == "states") {
      if (!value.is_array() || value.empty()) {
        return bad_request(
            "field 'states' must be a non-empty array of completed, failed, "
            "cancelled");
      }
      c.states.clear();
      for (const auto& s : value) {
        const std::string name = s.is_string() ? s.get<std::string>() : s.dump();
        if (name != "completed" && name != "failed" && name != "cancelled") {
          return bad_request("field 'states': '" + printable(name) +
                             "' is not a finished state (completed, failed, cancelled)");
        }
        c.states.push_back(name);
      }
    } else if (key == "dry_run") {
      if (!value.is_boolean()) {
        return bad_request("field 'dry_run' must be a boolean, got " +
                           std::string(json_type_name(value)));
      }
      c.dry_run = value.get<bool>();
    } else {
      return bad_request("unknown field '" + printable(key) +
                         "' in request body (expected older_than_ms, states, dry_run)");
    }
  }
  return c;
}

}  // namespace

api_result<nlohmann::json> parse_json_limited(std::string_view text, int max_depth) {
  using protocol::json_fault;
  const auto scan = protocol::scan_json(
      text, protocol::json_limits{.max_depth = static_cast<std::size_t>(max_depth)});
  if (scan.fault) {
    const json_fault& f = *scan.fault;
    switch (f.what) {
      case json_fault::kind::too_deep:
        return bad_request("JSON nested deeper than " + std::to_string(max_depth) + " levels");
      case json_fault::kind::duplicate_key:
        return bad_request("duplicate key \"" + f.key + "\" in JSON body");
      case json_fault::kind::syntax:
        // The byte offset says more than line/column for a one-line document (0-based, like the
        // job spec's and the worker protocol's offsets).
        if (f.message.empty()) return bad_request("malformed JSON");
        return bad_request("malformed JSON at byte " + std::to_string(f.offset) + ": " + f.reason);
      case json_fault::kind::too_large:  // no size limit here: the caller checks the body size
        break;
    }
    return bad_request("malformed JSON");
  }
  // Validated: this parse cannot fail, and it never throws on a checked document.
  return protocol::build_scanned_json(text);
}

api_result<api_call> parse_api_request(const api_request& request) {
  if (request.body.size() > max_request_body_bytes) {
    return api_error{413, "request body is " + std::to_string(request.body.size()) +
                              " bytes; the limit is " + std::to_string(max_request_body_bytes)};
  }
  const std::string_view target = request.target;
  if (target.empty() || target.front() != '/') {
    return bad_request("request target must be a path starting with '/', got '" +
                       printable(request.target) + "'");
  }
  const auto qmark = target.find('?');
  const auto path = target.substr(0, qmark);
  const auto query =
      qmark == std::string_view::npos ? std::string_view{} : target.substr(qmark + 1);

  const auto matched = match_route(path);
  if (!matched) return api_error{404, "unknown route " + printable(path)};
  const route r = matched->r;

  const auto& m = request.method;
  const bool post_only = r == route::job_cancel || r == route::job_resume;
  const bool method_ok =
      (r == route::jobs && (m == "GET" || m == "POST")) ||
      (r == route::job && (m == "GET" || m == "DELETE")) ||
      ((post_only || r == route::prune) && m == "POST") ||
      (r != route::jobs && r != route::job && r != route::prune && !post_only && m == "GET");
  if (!method_ok) {
    return api_error{405, "method " + printable(m) + " not allowed on " + printable(path) +
                              " (allowed: " + std::string(allowed_methods(r)) + ")"};
  }
  if (r == route::job || r == route::job_logs || r == route::job_history || post_only) {
    if (!is_valid_job_id(matched->id)) {
      return bad_request("invalid job id '" + printable(matched->id) +
                         "': expected 1 to 80 characters of A-Z a-z 0-9 . _ - not starting "
                         "with '.'");
    }
  }
  auto offset = parse_query(query, r, path);
  if (!offset) return offset.error();

  if ((m == "GET" || m == "DELETE") && !request.body.empty()) {
    return bad_request(std::string(m) + " " + std::string(path) + " takes no request body");
  }
  if (r == route::job && m == "GET" && !query.empty()) {
    return bad_request("unknown query parameter for GET " + printable(path) +
                       " (force is for DELETE)");
  }
  const std::string id(matched->id);
  switch (r) {
    case route::health:
      return health_call{};
    case route::jobs:
      if (m == "GET") return list_call{};
      return parse_submit(request);
    case route::job:
      if (m == "DELETE") return remove_call{id, *offset == 1};
      return status_call{id};
    case route::prune:
      return parse_prune(request);
    case route::dashboard:
      return dashboard_call{};
    case route::job_logs:
      return logs_call{id, *offset};
    case route::job_history:
      return history_call{id, static_cast<std::int64_t>(*offset)};
    case route::metrics:
      return metrics_call{};
    case route::job_cancel:
    case route::job_resume: {
      // No fields yet; an empty object is accepted so clients may always send JSON.
      if (!is_blank(request.body)) {
        auto doc = parse_json_limited(request.body);
        if (!doc) return doc.error();
        if (!doc->is_object() || !doc->empty()) {
          return bad_request("POST " + std::string(path) +
                             " takes no request body (or an empty object)");
        }
      }
      if (r == route::job_resume) return resume_call{id};
      return cancel_call{id};
    }
  }
  return api_error{500, "unhandled route"};
}

}  // namespace baton::supervisor
