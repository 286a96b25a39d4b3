// The dashboard's files as the daemon serves them: the page (web/dashboard.html, .js, .css) and
// uPlot's dist files, embedded into the binary at build time (cmake/embed_files.cmake generates
// the table from web/ and web/node_modules/uplot, pinned by web/package-lock.json), so the page
// works with no network and no files beside the binary. The table is static data owned by the
// generated source; lookups hand out views into it.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace baton::supervisor {

struct embedded_file {
  const char* path;  // the URL path it is served at: "/assets/dashboard.js"
  const unsigned char* data;
  std::size_t size;
};

// Every embedded file (generated source).
std::span<const embedded_file> embedded_files();

struct dashboard_asset {
  std::string_view path;
  std::string_view content_type;  // from the extension; charset utf-8 for text
  std::string_view bytes;
};

// The asset served at `path` (no query), if any. "/" and "/dashboard" are the page.
std::optional<dashboard_asset> find_dashboard_asset(std::string_view path);

// "text/html; charset=utf-8" for ".html", and so on; "application/octet-stream" when unknown.
std::string_view content_type_for(std::string_view path);

}  // namespace baton::supervisor
