#include "supervisor/dashboard_assets.h"

namespace baton::supervisor {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view content_type_for(std::string_view path) {
  if (ends_with(path, ".html")) return "text/html; charset=utf-8";
  if (ends_with(path, ".js")) return "text/javascript; charset=utf-8";
  if (ends_with(path, ".css")) return "text/css; charset=utf-8";
  if (ends_with(path, ".png")) return "image/png";
  if (ends_with(path, ".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

std::optional<dashboard_asset> find_dashboard_asset(std::string_view path) {
  if (path == "/" || path == "/dashboard" || path == "/dashboard/") path = "/dashboard.html";
  for (const auto& f : embedded_files()) {
    if (path == f.path) {
      return dashboard_asset{f.path, content_type_for(path),
                             std::string_view(reinterpret_cast<const char*>(f.data), f.size)};
    }
  }
  return std::nullopt;
}

}  // namespace baton::supervisor
