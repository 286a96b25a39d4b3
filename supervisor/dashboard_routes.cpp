#include "supervisor/dashboard_routes.h"

#include <variant>

#include "supervisor/control_token.h"
#include "supervisor/dashboard_assets.h"

namespace baton::supervisor {

namespace {

using header_list = std::vector<std::pair<std::string, std::string>>;

// On every answer: no sniffing, no framing, and no Referer carrying the page's token elsewhere.
header_list common_headers() {
  return {{"X-Content-Type-Options", "nosniff"},
          {"X-Frame-Options", "DENY"},
          {"Referrer-Policy", "no-referrer"}};
}

// The page and data name the token (in its URL, or behind it): never stored by any cache.
void no_store(web_response& r) { r.headers.emplace_back("Cache-Control", "no-store"); }

web_response json_answer(int status, const nlohmann::json& body) {
  web_response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  r.headers = common_headers();
  no_store(r);
  return r;
}

web_response error_answer(int status, const std::string& message) {
  return json_answer(status, {{"error", message}});
}

web_response from_api(const api_response& a) {
  if (!a.content_type.empty()) {
    web_response r;
    r.status = a.status;
    r.content_type = a.content_type;
    r.body = a.text;
    r.headers = common_headers();
    return r;
  }
  return json_answer(a.status, a.body.is_null() ? nlohmann::json::object() : a.body);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

split_token take_token(std::string_view query) {
  split_token out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (starts_with(param, "token=") || param == "token") {
      out.present = true;
      out.token = std::string(param.substr(param.size() > 6 ? 6 : param.size()));
      continue;
    }
    if (param.empty()) continue;
    if (!out.rest.empty()) out.rest += '&';
    out.rest.append(param);
  }
  return out;
}

std::filesystem::path dashboard_url_file(const std::filesystem::path& state_dir) {
  return state_dir / "dashboard-url";
}

std::string dashboard_url(std::string_view base_url, std::string_view token) {
  std::string out(base_url);
  out += "/?token=";
  out.append(token);
  return out;
}

web_response dashboard_router::handle(const web_request& request) {
  const std::string_view target = request.target;
  const auto q = target.find('?');
  const auto path = target.substr(0, q);
  const auto query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  const bool data = starts_with(path, "/v1/");

  if (request.method != "GET") {
    auto r = error_answer(405,
                          "this listener is read-only (GET only); what changes anything "
                          "goes through the control socket (`baton`)");
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (path == "/metrics") {
    if (!query.empty()) return error_answer(400, "GET /metrics takes no query");
    return from_api(inner_.handle(metrics_call{}));
  }
  if (!dashboard_on()) {
    return error_answer(404,
                        "not served on http_listen, which serves GET /metrics only; the "
                        "control API is on the control socket");
  }
  if (data) return data_route(request, path, query);
  if (const auto asset = find_dashboard_asset(path)) {
    web_response r;
    r.content_type = std::string(asset->content_type);
    r.body = std::string(asset->bytes);
    r.headers = common_headers();
    no_store(r);
    if (starts_with(asset->content_type, "text/html")) {
      // Only this origin's files; uPlot draws on a canvas and sets styles through the CSSOM,
      // which style-src does not govern, so nothing inline is needed.
      r.headers.emplace_back("Content-Security-Policy",
                             "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    }
    return r;
  }
  return error_answer(404,
                      "no such page on the baton dashboard: " + std::string(path.substr(0, 200)));
}

web_response dashboard_router::data_route(const web_request& request, std::string_view path,
                                          std::string_view query) {
  auto t = take_token(query);
  std::optional<std::string_view> presented;
  if (request.authorization) {
    const std::string_view a = *request.authorization;
    if (!starts_with(a, "Bearer ")) {
      return error_answer(401, "Authorization: expected `Bearer <dashboard token>`");
    }
    presented = a.substr(7);
  } else if (t.present) {
    presented = t.token;
  }
  if (!presented) {
    auto r = error_answer(401,
                          "the dashboard's data needs its token: open the URL the daemon printed "
                          "at start (dashboard on http://...?token=...), whose token= the page "
                          "sends back");
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"baton dashboard\"");
    return r;
  }
  if (!tokens_equal(*presented, token_)) {
    return error_answer(403,
                        "wrong dashboard token: the daemon makes a new one at each start; "
                        "open the URL it printed last");
  }
  std::string target(path);
  if (!t.rest.empty()) target += "?" + t.rest;
  auto call = parse_api_request({"GET", target, "", 0});
  if (!call) return error_answer(call.error().status, call.error().message);
  const bool read_only =
      std::holds_alternative<list_call>(*call) || std::holds_alternative<status_call>(*call) ||
      std::holds_alternative<history_call>(*call) || std::holds_alternative<logs_call>(*call);
  if (!read_only) {
    return error_answer(404, "not served to the dashboard: " + std::string(call_name(*call)) +
                                 "; the control API is on the control socket");
  }
  return from_api(inner_.handle(*call));
}

}  // namespace baton::supervisor
