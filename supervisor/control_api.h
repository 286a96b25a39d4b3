// The supervisor's control API as pure values: an HTTP request (already read off the socket by
// control_session) is routed and validated into one typed api_call, which the daemon's
// api_handler turns into an api_response. No I/O here, so every route and every error is unit
// tested without a socket. The wire contract is documented in protocol/README.md (Control API).
#pragma once

#include <boost/system/result.hpp>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace baton::supervisor {

// Largest request body accepted (the HTTP layer enforces the same limit while reading).
inline constexpr std::size_t max_request_body_bytes = std::size_t{1} << 20;
// Deepest JSON nesting accepted in any body: nlohmann has no limit of its own and dump() recurses.
inline constexpr int max_json_depth = 64;
// Longest submitter PATH accepted (Linux takes one environment string of up to 128 KiB,
// MAX_ARG_STRLEN; no shell's PATH comes near this).
inline constexpr std::size_t max_submit_path_bytes = 32 * 1024;

struct api_request {
  std::string method;  // case-sensitive, as on the wire: "GET", "POST"
  std::string target;  // origin-form: "/v1/jobs/abc/logs?offset=10"
  std::string body;
  std::uint32_t peer_uid = 0;  // already authorised by the server; for the daemon's records
  std::uint32_t peer_gid = 0;  // the peer's primary and supplementary groups (submit records them)
  std::vector<std::uint32_t> peer_groups = {};
};

// Who is asking, as the transport established it (control_unix_listener: the kernel's peer
// credentials; loopback TCP and the dashboard: whoever holds the token, taken as the owner).
// A privileged caller (root, or the daemon's own uid) may act on every job; any other only on
// the jobs it submitted (job_access.h).
struct api_caller {
  std::uint32_t uid = 0;
  bool privileged = true;
};

struct api_response {
  int status = 200;
  nlohmann::json body;  // always an object; errors are {"error": "<message>"}
  // Set for the one answer that is not JSON (`GET /metrics`, Prometheus text): sent as is with
  // this content type, and `body` is ignored.
  std::string text = {};
  std::string content_type = {};
};

// POST /v1/jobs: `spec` is the job document as the user wrote it; relative paths in it are
// resolved by the daemon against `base_dir` (the folder of the job file, absolute).
struct submit_call {
  nlohmann::json spec;
  std::string base_dir;
  std::uint32_t peer_uid = 0;
  // The submitter's groups: recorded as the job's owner, given to its workers when the daemon
  // runs jobs as their submitters (jobs_run_as = "submitter").
  std::uint32_t peer_gid = 0;
  std::vector<std::uint32_t> peer_groups = {};
  // The submitter's PATH ("path" in the body; `baton submit` sends its own): a worker that runs
  // as its submitter (or as the daemon's user, submitted by that same user) gets it, and a bare
  // worker.command is looked up in it, as the submitter's shell would.
  std::optional<std::string> path = std::nullopt;
};
struct list_call {};  // GET /v1/jobs
struct status_call {  // GET /v1/jobs/{id}
  std::string id;
};
struct logs_call {  // GET /v1/jobs/{id}/logs?offset=N
  std::string id;
  std::uint64_t offset = 0;
};
struct cancel_call {  // POST /v1/jobs/{id}/cancel
  std::string id;
};
struct resume_call {  // POST /v1/jobs/{id}/resume: a paused job (disk full, say) runs again
  std::string id;
};
struct health_call {};  // GET /v1/health
struct history_call {   // GET /v1/jobs/{id}/history?since=N: entries with seq > N
  std::string id;
  std::int64_t since = 0;
};
struct metrics_call {};  // GET /metrics: Prometheus text exposition format
// GET /v1/dashboard: the dashboard's URL with its token (`baton dashboard`), for whoever may use
// the control socket; 404 while http_listen is off.
struct dashboard_call {};
// DELETE /v1/jobs/{id}?force=true: the job and its folder go. A running job only with force,
// which cancels it first and removes it once its worker is gone.
struct remove_call {
  std::string id;
  bool force = false;
};
// POST /v1/prune {"older_than_ms": N, "states": ["completed", ...], "dry_run": false}: removes
// the finished jobs (completed, failed, cancelled; `states` narrows) not updated for
// `older_than_ms` (absent: any age). `dry_run` lists them and removes nothing.
struct prune_call {
  std::optional<std::int64_t> older_than_ms;
  std::vector<std::string> states = {"completed", "failed", "cancelled"};
  bool dry_run = false;
};

using api_call =
    std::variant<submit_call, list_call, status_call, logs_call, cancel_call, resume_call,
                 health_call, history_call, metrics_call, remove_call, prune_call, dashboard_call>;

// A rejected request: the HTTP status to answer with and a message for the user.
// Not an aggregate on purpose: C++20 would let api_result<T> confuse a T with an api_error.
struct api_error {
  api_error() = default;
  api_error(int s, std::string m) : status(s), message(std::move(m)) {}
  int status = 400;
  std::string message;
};
inline std::ostream& operator<<(std::ostream& os, const api_error& e) {
  return os << e.status << " " << e.message;
}
[[noreturn]] void throw_exception_from_error(const api_error& e, const boost::source_location&);

template <class T>
using api_result = boost::system::result<T, api_error>;

// Routes and validates a request. Errors: 413 body too large, 404 unknown route, 405 method not
// allowed on a known route, 400 for anything malformed (JSON with its byte offset, nesting past
// max_json_depth, duplicate keys, a field of the wrong type by name, a bad job id or offset).
api_result<api_call> parse_api_request(const api_request& request);

// Parses a JSON document with the depth and duplicate-key checks above, without recursing per
// level: a first SAX pass validates, only then is the document built. Errors name the byte offset.
api_result<nlohmann::json> parse_json_limited(std::string_view text,
                                              int max_depth = max_json_depth);

// Job ids: 1 to 80 characters of [A-Za-z0-9._-], not starting with '.'.
bool is_valid_job_id(std::string_view id);

// {"error": message} with the error's status.
api_response error_response(const api_error& e);
api_response error_response(int status, std::string message);

// The route name of a call, for logs: "submit", "list", ...
std::string_view call_name(const api_call& call);

// Implemented by the daemon. Called on the server's io thread, so it must not block: it answers
// from memory and queues work. Exceptions are caught by the server and answered with 500.
class api_handler {
 public:
  virtual ~api_handler();
  // As a privileged caller (tests, the token-checked dashboard and TCP transports).
  virtual api_response handle(const api_call& call) = 0;
  // As `caller`: what the control socket calls. A handler that keeps no owners serves
  // privileged callers only (403 for the rest), so forgetting to check is never an open door.
  virtual api_response handle(const api_call& call, const api_caller& caller);
};

}  // namespace baton::supervisor
