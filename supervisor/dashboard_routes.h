// What the read-only loopback listener (http_listener.h) answers, as a pure function of the
// request, so every route and refusal is tested without a socket:
// - `GET /metrics`: Prometheus text, token-free (exporter habits: a scraper has no token);
// - `GET /`, `/dashboard` and `/assets/...`: the dashboard's embedded files
//   (dashboard_assets.h), token-free too (they hold no data), the page with a
//   Content-Security-Policy that allows only this origin;
// - `GET /v1/jobs`, `/v1/jobs/{id}`, `/v1/jobs/{id}/history?since=N`,
// `/v1/jobs/{id}/logs?offset=N`:
//   the control API's own read-only calls, routed by parse_api_request and answered by the
//   daemon's handler, behind the dashboard token as Jupyter does: `token=` in the query or
//   `Authorization: Bearer`, compared in constant time; absent 401, wrong 403.
// Anything else is 404, any method but GET 405: nothing here changes anything, and a call that
// would is refused before it reaches the daemon. An empty token turns the dashboard off (the
// listener serves /metrics only). The router borrows the handler; the daemon owns both.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "supervisor/control_api.h"
#include "supervisor/web_server.h"

namespace baton::supervisor {

class dashboard_router {
 public:
  dashboard_router(api_handler& inner, std::string token)
      : inner_(inner), token_(std::move(token)) {}

  web_response handle(const web_request& request);

  bool dashboard_on() const { return !token_.empty(); }

 private:
  web_response data_route(const web_request& request, std::string_view path,
                          std::string_view query);

  api_handler& inner_;
  std::string token_;
};

// `query` without its `token=` parameters, and the value of the last one (empty if none).
struct split_token {
  std::string rest;
  std::string token;
  bool present = false;
};
split_token take_token(std::string_view query);

// Where the daemon keeps the page's URL with its token (mode 0600, os/private_file.h), so
// the daemon's user can find it again: <state_dir>/dashboard-url.
std::filesystem::path dashboard_url_file(const std::filesystem::path& state_dir);

// The page's URL with its token, as printed at start: "http://127.0.0.1:9464/?token=abc...".
std::string dashboard_url(std::string_view base_url, std::string_view token);

}  // namespace baton::supervisor
