#include "supervisor/dashboard_routes.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace baton::supervisor;
using json = nlohmann::json;

namespace {

const std::string api_token(64, 'a');

// Answers every call with its name (and the id or cursor it carries), so a test sees which calls
// got through and with what.
struct echo_handler final : api_handler {
  std::vector<std::string> seen;
  api_response handle(const api_call& call) override {
    std::string what(call_name(call));
    if (const auto* h = std::get_if<history_call>(&call)) {
      what += " " + h->id + " " + std::to_string(h->since);
    }
    if (const auto* l = std::get_if<logs_call>(&call)) {
      what += " " + l->id + " " + std::to_string(l->offset);
    }
    seen.push_back(what);
    if (std::holds_alternative<metrics_call>(call)) {
      api_response r;
      r.text = "baton_daemon_uptime_seconds 1\n";
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    }
    return {200, {{"call", what}}};
  }
};

std::string header(const web_response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return {};
}

web_request get(std::string target, std::optional<std::string> auth = std::nullopt) {
  return {"GET", std::move(target), std::move(auth)};
}

}  // namespace

TEST_CASE("the page is served token-free with a same-origin CSP and no caching",
          "[unit][dashboard_routes]") {
  echo_handler inner;
  dashboard_router r(inner, api_token);
  for (const std::string path : {"/", "/dashboard", "/?token=whatever"}) {
    INFO(path);
    const auto page = r.handle(get(path));
    CHECK(page.status == 200);
    CHECK(page.content_type == "text/html; charset=utf-8");
    CHECK_THAT(page.body, Catch::Contains("/assets/uPlot.iife.min.js"));
    CHECK_THAT(header(page, "Content-Security-Policy"), Catch::StartsWith("default-src 'self'"));
    CHECK(header(page, "X-Content-Type-Options") == "nosniff");
    CHECK(header(page, "Cache-Control") == "no-store");
    CHECK(header(page, "Referrer-Policy") == "no-referrer");
  }
  const auto js = r.handle(get("/assets/dashboard.js"));
  CHECK(js.status == 200);
  CHECK(js.content_type == "text/javascript; charset=utf-8");
  CHECK(header(js, "X-Content-Type-Options") == "nosniff");
  CHECK(r.handle(get("/assets/nope.js")).status == 404);
  CHECK(inner.seen.empty());
}

TEST_CASE("data routes need the token: absent 401, wrong 403, right by query or Bearer",
          "[unit][dashboard_routes]") {
  echo_handler inner;
  dashboard_router r(inner, api_token);
  const auto absent = r.handle(get("/v1/jobs"));
  CHECK(absent.status == 401);
  CHECK_THAT(json::parse(absent.body).at("error").get<std::string>(), Catch::Contains("token"));
  CHECK(header(absent, "WWW-Authenticate") == "Bearer realm=\"baton dashboard\"");
  CHECK(r.handle(get("/v1/jobs?token=")).status == 403);
  CHECK(r.handle(get("/v1/jobs?token=" + std::string(64, 'b'))).status == 403);
  CHECK(r.handle(get("/v1/jobs?token=" + api_token + "a")).status == 403);
  CHECK(r.handle(get("/v1/jobs", "Bearer " + std::string(64, 'b'))).status == 403);
  CHECK(r.handle(get("/v1/jobs", "Basic " + api_token)).status == 401);
  // The header wins over the query: a right query token does not rescue a wrong header.
  CHECK(r.handle(get("/v1/jobs?token=" + api_token, "Bearer nope")).status == 403);
  CHECK(inner.seen.empty());

  const auto ok = r.handle(get("/v1/jobs?token=" + api_token));
  CHECK(ok.status == 200);
  CHECK(header(ok, "Cache-Control") == "no-store");
  CHECK(r.handle(get("/v1/jobs/j-1", "Bearer " + api_token)).status == 200);
  CHECK(r.handle(get("/v1/jobs/j-1/history?since=41&token=" + api_token)).status == 200);
  CHECK(r.handle(get("/v1/jobs/j-1/logs?token=" + api_token + "&offset=7")).status == 200);
  CHECK(inner.seen == std::vector<std::string>{"list", "status", "history j-1 41", "logs j-1 7"});
}

TEST_CASE("nothing that changes anything gets through, token or not", "[unit][dashboard_routes]") {
  echo_handler inner;
  dashboard_router r(inner, api_token);
  for (const std::string method : {"POST", "PUT", "DELETE", "PATCH", "HEAD"}) {
    INFO(method);
    const auto a = r.handle({method, "/v1/jobs/j-1/cancel?token=" + api_token, std::nullopt});
    CHECK(a.status == 405);
    CHECK(header(a, "Allow") == "GET");
    CHECK(r.handle({method, "/v1/jobs?token=" + api_token, std::nullopt}).status == 405);
  }
  // A known mutating route by GET is the control API's 405; health is not the dashboard's.
  CHECK(r.handle(get("/v1/jobs/j-1/cancel?token=" + api_token)).status == 405);
  CHECK(r.handle(get("/v1/health?token=" + api_token)).status == 404);
  CHECK(r.handle(get("/v1/jobs/j-1/history?since=x&token=" + api_token)).status == 400);
  CHECK(inner.seen.empty());
}

TEST_CASE("metrics stay token-free, and without a token only /metrics is served",
          "[unit][dashboard_routes]") {
  echo_handler inner;
  dashboard_router with(inner, api_token);
  const auto m = with.handle(get("/metrics"));
  CHECK(m.status == 200);
  CHECK(m.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(m.body == "baton_daemon_uptime_seconds 1\n");
  CHECK(with.handle(get("/metrics?x=1")).status == 400);

  dashboard_router off(inner, "");
  CHECK_FALSE(off.dashboard_on());
  CHECK(off.handle(get("/metrics")).status == 200);
  CHECK(off.handle(get("/")).status == 404);
  const auto jobs = off.handle(get("/v1/jobs?token="));
  CHECK(jobs.status == 404);
  CHECK_THAT(jobs.body, Catch::Contains("control socket"));
  CHECK(inner.seen == std::vector<std::string>{"metrics", "metrics"});
}

TEST_CASE("take_token splits the token off the query", "[unit][dashboard_routes]") {
  auto t = take_token("since=3&token=abc&x=1");
  CHECK(t.present);
  CHECK(t.token == "abc");
  CHECK(t.rest == "since=3&x=1");
  t = take_token("since=3");
  CHECK_FALSE(t.present);
  CHECK(t.rest == "since=3");
  t = take_token("token");
  CHECK(t.present);
  CHECK(t.token.empty());
  CHECK(take_token("").rest.empty());
  CHECK(dashboard_url("http://127.0.0.1:1", "ab") == "http://127.0.0.1:1/?token=ab");
  CHECK(dashboard_url_file("/var/lib/baton") ==
        std::filesystem::path("/var/lib/baton/dashboard-url"));
}
