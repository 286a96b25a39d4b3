#include "supervisor/run_report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "supervisor/job_history.h"
#include "supervisor/job_status.h"
#include "supervisor/terminal_style.h"

namespace baton::supervisor {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string format_peak_mib(std::int64_t bytes) {
  return bytes > 0 ? fixed(static_cast<double>(bytes) / 1048576.0, 1) : std::string("-");
}

std::string format_leak_mib(std::optional<double> rate, std::optional<double> ci95) {
  if (!rate || !std::isfinite(*rate)) return "-";
  std::string out = fixed(*rate / 1048576.0, 2);
  if (out == "-0.00") out = "0.00";
  if (ci95 && std::isfinite(*ci95)) out += " +- " + fixed(*ci95 / 1048576.0, 2);
  return out;
}

restart_counts count_restarts(const job_record& r) {
  restart_counts c;
  for (const auto& [name, count] : r.exits_by_cause) {
    const auto cause = parse_exit_cause(name);
    if (!cause) continue;
    const auto category = restart_category(*cause);
    if (category == "recycle") c.recycles += count;
    if (category == "failure") c.failures += count;
    if (category == "user") c.user_stops += count;
  }
  return c;
}

std::string format_restarts(const restart_counts& c) {
  return plural(c.recycles, "recycle", "recycles") + ", " +
         plural(c.failures, "failure", "failures") + ", " +
         plural(c.user_stops, "user stop", "user stops");
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  if (seconds < 60) return fixed(seconds, 1) + "s";
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  char buf[64];
  if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buf;
}

std::string format_mib(std::int64_t bytes) {
  return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
}

std::string format_progress_line(const progress_view& v) {
  std::ostringstream o;
  const auto& r = v.record;
  const auto& l = v.live;
  o << "shard " << (r.shards.empty() ? 0 : r.shards.back().index);
  if (l.pid != 0) o << " (pid " << l.pid << ")";
  o << " | step " << l.step;
  if (l.total_steps > 0) o << "/" << l.total_steps;
  o << " epoch " << l.epoch + 1;
  o << " | loss " << (std::isfinite(l.loss) ? fixed(l.loss, 4) : std::string("-"));
  if (auto it = l.metrics.find("accuracy"); it != l.metrics.end()) {
    o << " acc " << fixed(it->second, 3);
  }
  o << " | rss " << ((l.rss_bytes + (1 << 19)) >> 20);
  if (v.soft_limit_mib > 0) o << "/" << v.soft_limit_mib;
  o << " MiB";
  if (l.samples_per_sec > 0)
    o << " | " << static_cast<std::int64_t>(l.samples_per_sec) << " samples/s";
  if (v.steps_per_sec > 0 && l.total_steps > l.step) {
    o << " | ETA "
      << format_duration(static_cast<double>(l.total_steps - l.step) / v.steps_per_sec);
  }
  const auto c = count_restarts(r);
  o << " | recycles " << c.recycles;
  if (c.failures > 0) o << " " << paint("failures " + std::to_string(c.failures), "31", v.colour);
  return o.str();
}

std::string format_summary(const job_record& r, double wall_seconds, bool colour) {
  std::ostringstream o;
  o << "job " << r.id << ": " << paint_state(to_string(r.state), colour);
  if (!r.diagnosis.empty()) o << " (" << r.diagnosis << ")";
  o << " after " << format_duration(wall_seconds) << ", step " << r.checkpoint_step;
  if (r.total_steps > 0) o << "/" << r.total_steps;
  o << ", " << r.shards.size() << " worker" << (r.shards.size() == 1 ? "" : "s") << "\n";
  if (!r.shards.empty()) {
    char line[200];
    std::snprintf(line, sizeof line, "  %5s %7s %8s %8s  %-13s %9s %16s  %s\n", "shard", "pid",
                  "from", "to", "exit", "peak MiB", "leak MiB/step", "detail");
    o << line;
    for (const auto& s : r.shards) {
      // Padded by paint_state: the escape codes have no width on screen.
      const std::string exit =
          paint_state(s.cause ? to_string(*s.cause) : std::string_view("running"), colour, 13);
      std::snprintf(line, sizeof line, "  %5lld %7lld %8lld %8lld  %s %9s %16s  %s\n",
                    static_cast<long long>(s.index), static_cast<long long>(s.pid),
                    static_cast<long long>(s.start_step), static_cast<long long>(s.end_step),
                    exit.c_str(), format_peak_mib(s.peak_rss_bytes).c_str(),
                    format_leak_mib(s.leak_bytes_per_step, s.leak_ci95_bytes_per_step).c_str(),
                    s.detail.c_str());
      o << line;
    }
  }
  if (auto leak = job_leak(r)) {
    o << "  leak: " << format_leak_mib(leak->bytes_per_step, leak->ci95_bytes_per_step)
      << " MiB/step over " << plural(static_cast<int>(leak->workers), "worker", "workers") << "\n";
  } else {
    o << "  leak: " << leak.error().message << "\n";
  }
  o << "  restarts: " << format_restarts(count_restarts(r)) << "\n";
  o << "  exits:";
  if (r.exits_by_cause.empty()) o << " none";
  for (const auto& [cause, count] : r.exits_by_cause) o << " " << cause << " " << count;
  o << "\n";
  if (!r.metrics.empty()) {
    o << "  metrics:";
    for (const auto& [k, v] : r.metrics) o << " " << k << " " << fixed(v, 4);
    o << "\n";
  }
  o << "  checkpoint: " << (r.checkpoint_path.empty() ? "(none)" : r.checkpoint_path) << "\n";
  return o.str();
}

nlohmann::json summary_json(const job_record& r, double wall_seconds, const log_view* log) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : r.shards) shards.push_back(shard_json(s));
  nlohmann::json restarts_by_cause = nlohmann::json::object();
  for (const auto& [cause, count] : r.exits_by_cause) {
    if (cause != "completed") restarts_by_cause[cause] = count;
  }
  nlohmann::json doc = {{"schema_version", json_schema_version},
                        {"id", r.id},
                        {"name", r.name},
                        {"state", to_string(r.state)},
                        {"diagnosis", r.diagnosis},
                        {"restarts", restarts_json(r)},
                        {"checkpoint_path", r.checkpoint_path},
                        {"checkpoint_step", r.checkpoint_step},
                        {"total_steps", r.total_steps},
                        {"wall_seconds", wall_seconds},
                        {"shards", std::move(shards)},
                        {"restarts_by_cause", std::move(restarts_by_cause)},
                        {"exits_by_cause", r.exits_by_cause},
                        {"metrics", r.metrics}};
  add_leak_fields(doc, r);
  if (log) add_log_fields(doc, *log);
  return doc;
}

}  // namespace baton::supervisor
