#include "supervisor/control_endpoint.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "os/env.h"
#include "supervisor/control_api.h"
#include "supervisor/control_token.h"

namespace baton::supervisor {

namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, 5> keys = {"version", "address", "port", "token", "pid"};

std::string describe(const json& v) {
  const std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

std::optional<std::int64_t> integer(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return std::nullopt;
}

}  // namespace

std::string render_control_endpoint(const control_endpoint& e) {
  json j = {{"version", control_endpoint_version},
            {"address", e.address},
            {"port", e.port},
            {"token", e.token},
            {"pid", e.pid}};
  return j.dump() + "\n";
}

result<control_endpoint> parse_control_endpoint(std::string_view text) {
  if (text.size() > max_control_endpoint_bytes) {
    return make_error("endpoint file is " + std::to_string(text.size()) + " bytes; at most " +
                      std::to_string(max_control_endpoint_bytes) + " expected");
  }
  auto doc = parse_json_limited(text, 4);
  if (!doc) return make_error(doc.error().message);
  if (!doc->is_object()) return make_error("(document): expected an object, got " + describe(*doc));
  std::vector<std::string> errors;
  for (const auto& [k, v] : doc->items()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      errors.push_back(k + ": unknown key");
    }
  }
  for (const auto k : keys) {
    if (!doc->contains(std::string(k))) errors.push_back(std::string(k) + ": missing");
  }
  control_endpoint e;
  if (auto it = doc->find("version"); it != doc->end()) {
    const auto v = integer(*it);
    if (!v || *v != control_endpoint_version) {
      errors.push_back("version: expected " + std::to_string(control_endpoint_version) +
                       " (this baton's format), got " + describe(*it));
    }
  }
  if (auto it = doc->find("address"); it != doc->end()) {
    if (!it->is_string() || it->get_ref<const std::string&>() != "127.0.0.1") {
      errors.push_back(
          "address: expected \"127.0.0.1\" (the daemon listens on loopback only), got " +
          describe(*it));
    } else {
      e.address = it->get<std::string>();
    }
  }
  if (auto it = doc->find("port"); it != doc->end()) {
    const auto v = integer(*it);
    if (!v || *v < 1 || *v > 65535) {
      errors.push_back("port: expected an integer from 1 to 65535, got " + describe(*it));
    } else {
      e.port = static_cast<std::uint16_t>(*v);
    }
  }
  if (auto it = doc->find("token"); it != doc->end()) {
    // Never echo a token: the file is a secret, and error messages travel to logs.
    if (!it->is_string() || !is_valid_control_token(it->get_ref<const std::string&>())) {
      errors.push_back("token: expected " + std::to_string(control_token_chars) +
                       " lowercase hex digits");
    } else {
      e.token = it->get<std::string>();
    }
  }
  if (auto it = doc->find("pid"); it != doc->end()) {
    const auto v = integer(*it);
    if (!v || *v <= 0) {
      errors.push_back("pid: expected a positive integer, got " + describe(*it));
    } else {
      e.pid = *v;
    }
  }
  if (!errors.empty()) {
    std::string message;
    for (const auto& line : errors) message += (message.empty() ? "" : "\n") + line;
    return make_error(message);
  }
  return e;
}

result<control_endpoint> load_control_endpoint(os::env& env, const std::filesystem::path& file) {
  if (!env.file_exists(file)) {
    return make_error("cannot read control endpoint file " + file.string() +
                      ": it does not exist (is `baton serve` running?)");
  }
  auto in = env.new_readable_file(file);
  if (!in) {
    return make_error("cannot read control endpoint file " + file.string() + ": " +
                      in.error().message +
                      " (only Administrators, SYSTEM and the daemon's account or group may)");
  }
  // One byte past the cap tells an oversized file from one exactly at it.
  std::string text;
  if (auto s = (*in)->read(0, max_control_endpoint_bytes + 1, text); !s) {
    return make_error("cannot read control endpoint file " + file.string() + ": " +
                      s.error().message);
  }
  auto e = parse_control_endpoint(text);
  if (!e) return prefix_lines(file.string() + ": ", e.error());
  return e;
}

}  // namespace baton::supervisor
