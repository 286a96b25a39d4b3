#include "supervisor/run_report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace baton::supervisor {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

int restarts(const job_record& r) {
  int n = 0;
  for (const auto& [cause, count] : r.exits_by_cause) {
    if (cause != "completed") n += count;
  }
  return n;
}

}  // namespace

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
  o << " | restarts " << restarts(r);
  return o.str();
}

std::string format_summary(const job_record& r, double wall_seconds) {
  std::ostringstream o;
  o << "job " << r.id << ": " << to_string(r.state);
  if (!r.diagnosis.empty()) o << " (" << r.diagnosis << ")";
  o << " after " << format_duration(wall_seconds) << ", step " << r.checkpoint_step;
  if (r.total_steps > 0) o << "/" << r.total_steps;
  o << ", " << r.shards.size() << " worker" << (r.shards.size() == 1 ? "" : "s") << "\n";
  if (!r.shards.empty()) {
    char line[200];
    std::snprintf(line, sizeof line, "  %5s %7s %8s %8s  %-12s %10s %14s  %s\n", "shard", "pid",
                  "from", "to", "exit", "peak RSS", "leak/step", "detail");
    o << line;
    for (const auto& s : r.shards) {
      const std::string leak = std::abs(s.leak_bytes_per_step) >= 1024
                                   ? fixed(s.leak_bytes_per_step / 1048576.0, 2) + " MiB"
                                   : fixed(s.leak_bytes_per_step, 0) + " B";
      std::snprintf(line, sizeof line, "  %5lld %7lld %8lld %8lld  %-12s %10s %14s  %s\n",
                    static_cast<long long>(s.index), static_cast<long long>(s.pid),
                    static_cast<long long>(s.start_step), static_cast<long long>(s.end_step),
                    s.cause ? std::string(to_string(*s.cause)).c_str() : "running",
                    format_mib(s.peak_rss_bytes).c_str(), leak.c_str(), s.detail.c_str());
      o << line;
    }
  }
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

nlohmann::json summary_json(const job_record& r, double wall_seconds) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : r.shards) {
    shards.push_back(
        {{"index", s.index},
         {"attempt", s.attempt},
         {"pid", s.pid},
         {"start_step", s.start_step},
         {"end_step", s.end_step},
         {"exit_cause", s.cause ? nlohmann::json(to_string(*s.cause)) : nlohmann::json()},
         {"detail", s.detail},
         {"peak_rss_bytes", s.peak_rss_bytes},
         {"leak_bytes_per_step", s.leak_bytes_per_step}});
  }
  nlohmann::json restarts_by_cause = nlohmann::json::object();
  for (const auto& [cause, count] : r.exits_by_cause) {
    if (cause != "completed") restarts_by_cause[cause] = count;
  }
  return {{"id", r.id},
          {"state", to_string(r.state)},
          {"diagnosis", r.diagnosis},
          {"checkpoint_path", r.checkpoint_path},
          {"checkpoint_step", r.checkpoint_step},
          {"total_steps", r.total_steps},
          {"wall_seconds", wall_seconds},
          {"shards", std::move(shards)},
          {"restarts_by_cause", std::move(restarts_by_cause)},
          {"exits_by_cause", r.exits_by_cause},
          {"metrics", r.metrics}};
}

}  // namespace baton::supervisor
