#include "os/cgroup.h"

#include <charconv>
#include <cstdio>

namespace baton::os::cgroup {

namespace {

// Splits off the next line of `s` (without its '\n').
std::string_view next_line(std::string_view& s) {
  const auto end = s.find('\n');
  const auto line = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end + 1);
  return line;
}

std::string_view next_word(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const auto end = s.find(' ');
  const auto word = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return word;
}

template <class Int>
bool parse_int(std::string_view s, Int& out) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (std::size_t k = 1; k <= 3; ++k) {
        if (s[i + k] < '0' || s[i + k] > '7') {
          ok = false;
        } else {
          v = v * 8 + (s[i + k] - '0');
        }
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool has_option(std::string_view options, std::string_view want) {
  while (!options.empty()) {
    const auto comma = options.find(',');
    if (options.substr(0, comma) == want) return true;
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return false;
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::optional<std::uint64_t> stat_value(std::string_view memory_stat, std::string_view key) {
  while (!memory_stat.empty()) {
    auto line = next_line(memory_stat);
    const auto name = next_word(line);
    if (name != key) continue;
    std::uint64_t v = 0;
    if (parse_int(next_word(line), v)) return v;
    return std::nullopt;
  }
  return std::nullopt;
}

result<std::uint64_t> v2_memory_bytes(std::string_view memory_stat) {
  const auto anon = stat_value(memory_stat, "anon");
  if (!anon) return make_error("memory.stat: no anon field");
  if (const auto kernel = stat_value(memory_stat, "kernel")) return *anon + *kernel;
  std::uint64_t kernel = 0;
  for (const auto key :
       {"kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc", "slab"}) {
    kernel += stat_value(memory_stat, key).value_or(0);
  }
  return *anon + kernel;
}

result<std::uint64_t> v1_memory_bytes(std::string_view memory_stat,
                                      std::optional<std::uint64_t> kmem_usage) {
  const auto rss = stat_value(memory_stat, "total_rss");
  if (!rss) return make_error("memory.stat: no total_rss field");
  return *rss + kmem_usage.value_or(0);
}

membership parse_proc_cgroup(std::string_view text) {
  membership m;
  while (!text.empty()) {
    const auto line = next_line(text);
    // hierarchy-ID:controller-list:path; the path may itself hold ':'.
    const auto first = line.find(':');
    if (first == std::string_view::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const auto id = line.substr(0, first);
    const auto controllers = line.substr(first + 1, second - first - 1);
    const auto path = std::string(line.substr(second + 1));
    if (id == "0" && controllers.empty()) {
      m.v2 = path;
    } else if (has_option(controllers, "memory")) {
      m.v1_memory = path;
    }
  }
  return m;
}

mounts parse_mountinfo(std::string_view text) {
  mounts out;
  while (!text.empty()) {
    auto line = next_line(text);
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const auto dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    auto head = line.substr(0, dash);
    auto tail = line.substr(dash + 3);
    next_word(head);
    next_word(head);
    next_word(head);
    const auto root = unescape(next_word(head));
    const auto point = unescape(next_word(head));
    const auto fstype = next_word(tail);
    next_word(tail);  // source
    const auto super_options = next_word(tail);
    if (fstype == "cgroup2" && !out.v2) {
      out.v2 = mount{point, root};
    } else if (fstype == "cgroup" && !out.v1_memory && has_option(super_options, "memory")) {
      out.v1_memory = mount{point, root};
    }
  }
  return out;
}

std::vector<std::int64_t> parse_pids(std::string_view text) {
  std::vector<std::int64_t> out;
  while (!text.empty()) {
    const auto line = next_line(text);
    std::int64_t pid = 0;
    if (parse_int(line, pid) && pid > 0) out.push_back(pid);
  }
  return out;
}

bool populated(std::string_view cgroup_events) {
  while (!cgroup_events.empty()) {
    auto line = next_line(cgroup_events);
    if (next_word(line) != "populated") continue;
    return next_word(line) != "0";
  }
  return false;
}

std::string supervisor_dir_name(std::string_view state_key) {
  std::string name = "baton-";
  name += hex16(fnv1a(state_key));
  return name;
}

std::string job_dir_name(std::string_view job_id) {
  std::string name = "job-";
  bool changed = job_id.empty() || job_id.size() > 64 || job_id == "." || job_id == "..";
  for (const char c : job_id.substr(0, 64)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';
    changed = changed || !plain;
  }
  if (changed) {
    name += '-';
    name += hex16(fnv1a(job_id));
  }
  return name;
}

std::optional<std::string> locate(const mount& m, std::string_view path) {
  std::string_view root = m.root;
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (root != "/") {
    if (path.substr(0, root.size()) != root) return std::nullopt;
    path.remove_prefix(root.size());
    if (!path.empty() && path.front() != '/') return std::nullopt;
  }
  std::string out = m.point;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (!path.empty()) {
    if (out != "/") out += '/';
    out += path;
  }
  return out;
}

}  // namespace baton::os::cgroup
