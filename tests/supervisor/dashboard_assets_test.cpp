#include "supervisor/dashboard_assets.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <string>

using namespace baton::supervisor;

namespace {

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(BATON_SOURCE_DIR) + "/" + relative, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("the page and uPlot are embedded byte for byte", "[unit][dashboard_assets]") {
  const auto page = find_dashboard_asset("/dashboard.html");
  REQUIRE(page);
  CHECK(page->bytes == read_source("web/dashboard.html"));
  CHECK(page->content_type == "text/html; charset=utf-8");
  const auto js = find_dashboard_asset("/assets/dashboard.js");
  REQUIRE(js);
  CHECK(js->bytes == read_source("web/dashboard.js"));
  CHECK(js->content_type == "text/javascript; charset=utf-8");
  const auto uplot = find_dashboard_asset("/assets/uPlot.iife.min.js");
  REQUIRE(uplot);
  CHECK(uplot->bytes == read_source("web/node_modules/uplot/dist/uPlot.iife.min.js"));
  CHECK(uplot->bytes.size() > 10000);
  const auto css = find_dashboard_asset("/assets/uPlot.min.css");
  REQUIRE(css);
  CHECK(css->content_type == "text/css; charset=utf-8");
  CHECK(find_dashboard_asset("/assets/dashboard.css"));
}

TEST_CASE("the page is at / and /dashboard, other paths are nothing", "[unit][dashboard_assets]") {
  CHECK(find_dashboard_asset("/").value().path == "/dashboard.html");
  CHECK(find_dashboard_asset("/dashboard").value().path == "/dashboard.html");
  CHECK_FALSE(find_dashboard_asset("/assets/"));
  CHECK_FALSE(find_dashboard_asset("/assets/../dashboard.html"));
  CHECK_FALSE(find_dashboard_asset("/web/dashboard.js"));
  CHECK_FALSE(find_dashboard_asset(""));
}

TEST_CASE("content types by extension", "[unit][dashboard_assets]") {
  CHECK(content_type_for("/a.html") == "text/html; charset=utf-8");
  CHECK(content_type_for("/a.css") == "text/css; charset=utf-8");
  CHECK(content_type_for("/a.png") == "image/png");
  CHECK(content_type_for("/a") == "application/octet-stream");
  CHECK(content_type_for("/a.js.map") == "application/octet-stream");
}
