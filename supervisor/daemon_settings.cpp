// Validation of daemon settings files, in the job spec's style: limits and syntax first (a SAX
// pass for depth and duplicate keys), then a typed walk that collects every problem by JSON path
// instead of stopping at the first one, then the cross-field rule (soft below hard).
#include "supervisor/daemon_settings.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "os/env.h"
#include "protocol/document_file.h"
#include "protocol/field_checker.h"
#include "protocol/json_parse.h"
#include "supervisor/control_server.h"
#include "supervisor/http_listener.h"

namespace baton::supervisor {

namespace {

using json = nlohmann::json;
using protocol::child_path;
using protocol::describe;
using protocol::join_lines;
using protocol::suggestion;
using protocol::unknown_keys;
namespace fs = std::filesystem;

constexpr std::size_t max_settings_bytes = 1 << 20;
constexpr std::size_t max_settings_depth = 16;
// sockaddr_un::sun_path holds 108 bytes including the terminating NUL.
constexpr std::size_t max_socket_path = 107;

constexpr std::array<std::string_view, 16> top_keys = {
    "state_dir",         "socket",          "socket_group",
    "control_port",      "http_listen",     "max_workers",
    "default_memory",    "log_level",       "max_checkpoint_mib",
    "header_timeout_ms", "max_connections", "max_connections_per_uid",
    "log_max_mib",       "log_keep",        "jobs_run_as",
    "allow_root_jobs"};
constexpr std::array<std::string_view, 2> run_as_names = {"daemon", "submitter"};
constexpr std::array<std::string_view, 2> memory_keys = {"soft_limit_mib", "hard_limit_mib"};
constexpr std::array<std::string_view, 4> level_names = {"error", "warning", "info", "debug"};

class checker {
 public:
  explicit checker(fs::path base_dir) : base_dir_(std::move(base_dir)) {}

  void fail(const std::string& path, const std::string& message) {
    errors_.push_back(path + ": " + message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

  bool object(const json& j, const std::string& path, std::span<const std::string_view> keys) {
    if (!j.is_object()) {
      fail(path.empty() ? "(document)" : path, "expected an object, got " + describe(j));
      return false;
    }
    for (const auto& k : unknown_keys(j, keys)) {
      fail(child_path(path, k), "unknown key; " + suggestion(k, keys));
    }
    return true;
  }

  void path_field(const json& doc, const char* key, fs::path& out) {
    const auto it = doc.find(key);
    if (it == doc.end()) return;
    if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
      fail(key, "expected a non-empty path string, got " + describe(*it));
      return;
    }
    const auto& text = it->get_ref<const std::string&>();
    if (text.find('\0') != std::string::npos) {
      fail(key, "path contains a NUL byte");
      return;
    }
    fs::path p(text);
    out = p.is_absolute() ? p.lexically_normal() : (base_dir_ / p).lexically_normal();
  }

  std::optional<std::int64_t> positive_int(const json& j, const std::string& path,
                                           std::int64_t max) {
    if (!j.is_number_integer() && !j.is_number_unsigned()) {
      fail(path, "expected a positive integer, got " + describe(j));
      return std::nullopt;
    }
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail(path, "expected at most " + std::to_string(max) + ", got " + j.dump());
      return std::nullopt;
    }
    const auto v = j.get<std::int64_t>();
    if (v <= 0) {
      fail(path, "expected a positive integer, got " + j.dump());
      return std::nullopt;
    }
    if (v > max) {
      fail(path, "expected at most " + std::to_string(max) + ", got " + j.dump());
      return std::nullopt;
    }
    return v;
  }

 private:
  fs::path base_dir_;
  std::vector<std::string> errors_;
};

}  // namespace

std::string_view to_string(log_level l) { return level_names[static_cast<std::size_t>(l)]; }
std::string_view to_string(jobs_run_as r) { return run_as_names[static_cast<std::size_t>(r)]; }

result<log_level> parse_log_level(std::string_view s) {
  for (std::size_t i = 0; i < level_names.size(); ++i) {
    if (level_names[i] == s) return static_cast<log_level>(i);
  }
  return make_error("unknown log level \"" + std::string(s) + "\"; " + suggestion(s, level_names));
}

result<daemon_settings> parse_daemon_settings(std::string_view text, const fs::path& base_dir) {
  if (text.size() > max_settings_bytes) {
    return make_error("document is " + std::to_string(text.size()) +
                      " bytes; a settings file may be at most 1 MiB");
  }
  auto doc = protocol::parse_json_guarded(text, max_settings_depth);
  if (!doc) return doc.error();
  checker c(base_dir);
  daemon_settings s;
  if (!c.object(*doc, "", top_keys)) return make_error(join_lines(c.errors()));

  c.path_field(*doc, "state_dir", s.state_dir);
  c.path_field(*doc, "socket", s.socket);
  // On Windows `socket` names the endpoint file, an ordinary file with no such limit.
  if (native_control_transport() == control_transport::unix_socket && !s.socket.empty() &&
      s.socket.native().size() > max_socket_path) {
    c.fail("socket", "path is " + std::to_string(s.socket.native().size()) +
                         " bytes; Unix sockets allow at most " + std::to_string(max_socket_path));
  }
  if (const auto it = doc->find("socket_group"); it != doc->end() && !it->is_null()) {
    if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
      c.fail("socket_group", "expected a group name or null, got " + describe(*it));
    } else {
      s.socket_group = it->get<std::string>();
    }
  }
  if (const auto it = doc->find("control_port"); it != doc->end() && !it->is_null()) {
    // 0 is allowed here (unlike positive_int): it asks the OS for any free port.
    const bool integral = it->is_number_integer() || it->is_number_unsigned();
    if (!integral || (it->is_number_integer() && it->get<std::int64_t>() < 0) ||
        (it->is_number_unsigned() && it->get<std::uint64_t>() > max_control_port) ||
        (it->is_number_integer() && it->get<std::int64_t>() > max_control_port)) {
      c.fail("control_port", "expected a port from 0 to " + std::to_string(max_control_port) +
                                 " (0: any free port), got " + describe(*it));
    } else {
      s.control_port = static_cast<int>(it->get<std::int64_t>());
    }
  }
  if (const auto it = doc->find("http_listen"); it != doc->end() && !it->is_null()) {
    if (!it->is_string()) {
      c.fail("http_listen", "expected \"127.0.0.1:PORT\" or null, got " + describe(*it));
    } else if (auto a = parse_http_listen(it->get_ref<const std::string&>()); !a) {
      // The message names the field already.
      constexpr std::string_view prefix = "http_listen: ";
      const auto& m = a.error().message;
      c.fail("http_listen", m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m);
    } else {
      s.http_listen = it->get<std::string>();
    }
  }
  if (const auto it = doc->find("max_workers"); it != doc->end()) {
    if (auto v = c.positive_int(*it, "max_workers", max_max_workers)) {
      s.max_workers = static_cast<int>(*v);
    }
  }
  if (const auto it = doc->find("max_checkpoint_mib"); it != doc->end()) {
    if (auto v = c.positive_int(*it, "max_checkpoint_mib", std::int64_t{1} << 30)) {
      s.max_checkpoint_mib = *v;
    }
  }
  if (const auto it = doc->find("log_max_mib"); it != doc->end()) {
    if (auto v = c.positive_int(*it, "log_max_mib", max_log_max_mib)) s.log_max_mib = *v;
  }
  if (const auto it = doc->find("log_keep"); it != doc->end()) {
    if (auto v = c.positive_int(*it, "log_keep", max_log_keep)) s.log_keep = static_cast<int>(*v);
  }
  if (const auto it = doc->find("default_memory"); it != doc->end()) {
    if (c.object(*it, "default_memory", memory_keys)) {
      // 2^40 MiB is a petabyte: far past any machine, still far from overflow in bytes.
      constexpr std::int64_t max_mib = std::int64_t{1} << 40;
      for (const auto key : memory_keys) {
        const auto v = it->find(std::string(key));
        if (v == it->end() || v->is_null()) continue;
        auto mib = c.positive_int(*v, "default_memory." + std::string(key), max_mib);
        (key == "soft_limit_mib" ? s.default_soft_limit_mib : s.default_hard_limit_mib) = mib;
      }
      if (s.default_soft_limit_mib && s.default_hard_limit_mib &&
          *s.default_soft_limit_mib >= *s.default_hard_limit_mib) {
        c.fail("default_memory.soft_limit_mib",
               "must be below default_memory.hard_limit_mib (" +
                   std::to_string(*s.default_soft_limit_mib) +
                   " >= " + std::to_string(*s.default_hard_limit_mib) + ")");
      }
    }
  }
  if (const auto it = doc->find("log_level"); it != doc->end()) {
    if (!it->is_string()) {
      c.fail("log_level", "expected a string, got " + describe(*it));
    } else if (auto l = parse_log_level(it->get_ref<const std::string&>()); l) {
      s.level = *l;
    } else {
      c.fail("log_level", l.error().message);
    }
  }
  if (const auto it = doc->find("jobs_run_as"); it != doc->end()) {
    const auto* name = it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
    const auto found =
        name ? std::find(run_as_names.begin(), run_as_names.end(), *name) : run_as_names.end();
    if (found == run_as_names.end()) {
      c.fail("jobs_run_as",
             "expected \"daemon\" (workers run as the daemon's user) or "
             "\"submitter\" (as the user who submitted the job; the daemon must "
             "run as root), got " +
                 describe(*it));
    } else {
      s.run_as = static_cast<jobs_run_as>(found - run_as_names.begin());
    }
  }
  if (const auto it = doc->find("allow_root_jobs"); it != doc->end()) {
    if (!it->is_boolean()) {
      c.fail("allow_root_jobs", "expected true or false, got " + describe(*it));
    } else {
      s.allow_root_jobs = it->get<bool>();
    }
  }
  if (const auto it = doc->find("header_timeout_ms"); it != doc->end()) {
    if (auto v = c.positive_int(*it, "header_timeout_ms", max_header_timeout_ms)) {
      s.header_timeout_ms = *v;
    }
  }
  bool connections_ok = true;
  for (const auto key : {"max_connections", "max_connections_per_uid"}) {
    const auto it = doc->find(key);
    if (it == doc->end()) continue;
    auto v = c.positive_int(*it, key, max_max_connections);
    if (!v) {
      connections_ok = false;
      continue;
    }
    (std::string_view(key) == "max_connections" ? s.max_connections : s.max_connections_per_uid) =
        static_cast<int>(*v);
  }
  // Below the global limit, so one uid can never take every slot (the rest stays the owner's).
  // Left out, it follows a small max_connections down (half of it) instead of being an error.
  if (connections_ok && !doc->contains("max_connections_per_uid") &&
      s.max_connections_per_uid >= s.max_connections) {
    s.max_connections_per_uid = std::max(1, s.max_connections / 2);
  }
  if (connections_ok && s.max_connections_per_uid >= s.max_connections) {
    c.fail("max_connections_per_uid", "must be below max_connections (" +
                                          std::to_string(s.max_connections_per_uid) +
                                          " >= " + std::to_string(s.max_connections) + ")");
  }
  if (!c.errors().empty()) return make_error(join_lines(c.errors()));
  return s;
}

result<daemon_settings> load_daemon_settings(os::env& e, const fs::path& file) {
  return protocol::load_document(e, file, "settings file", parse_daemon_settings);
}

nlohmann::json to_json(const daemon_settings& s) {
  const auto opt = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  return {{"state_dir", s.state_dir.string()},
          {"socket", s.socket.string()},
          {"socket_group", opt(s.socket_group)},
          {"control_port", opt(s.control_port)},
          {"http_listen", opt(s.http_listen)},
          {"max_workers", s.max_workers},
          {"default_memory",
           {{"soft_limit_mib", opt(s.default_soft_limit_mib)},
            {"hard_limit_mib", opt(s.default_hard_limit_mib)}}},
          {"log_level", to_string(s.level)},
          {"max_checkpoint_mib", s.max_checkpoint_mib},
          {"log_max_mib", s.log_max_mib},
          {"log_keep", s.log_keep},
          {"header_timeout_ms", s.header_timeout_ms},
          {"max_connections", s.max_connections},
          {"max_connections_per_uid", s.max_connections_per_uid},
          {"jobs_run_as", to_string(s.run_as)},
          {"allow_root_jobs", s.allow_root_jobs}};
}

}  // namespace baton::supervisor
