// Every malformed request of bad_api_requests.h gets its exact status and message from
// parse_api_request, and the answer the server would write is a JSON object {"error": message}.
#include "tests/supervisor/bad_api_requests.h"

#include <catch2/catch.hpp>
#include <set>

#include "supervisor/control_api.h"

using namespace baton::supervisor;

TEST_CASE("malformed API requests get their exact status and message", "[unit][control_api]") {
  const auto rows = testing::bad_api_requests();
  REQUIRE(rows.size() >= 20);
  std::set<std::string> names;
  for (const auto& row : rows) {
    INFO(row.what << ": " << row.method << " " << row.target);
    CHECK(names.insert(row.what).second);
    const auto r = parse_api_request(api_request{row.method, row.target, row.body, 1000});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().status == row.status);
    CHECK(r.error().message == row.message);
    const auto response = error_response(r.error());
    CHECK(response.status == row.status);
    CHECK(response.body == nlohmann::json{{"error", row.message}});
  }
}
