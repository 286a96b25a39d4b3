// The daemon's Prometheus metrics (`GET /metrics`): a pure renderer from what the daemon knows of
// its jobs (records, the running workers' live progress, the jobs' memory limits, their
// histories) to the text exposition format 0.0.4, for Prometheus and `promtool check metrics`.
// Names follow the Prometheus conventions: `baton_` prefix, base units in the name (`_bytes`,
// `_seconds`), `_total` on counters only, HELP and TYPE for every family, label values escaped.
// The families and their labels are documented in protocol/README.md (Metrics). The caller owns
// everything passed in; nothing here reads a file or a clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/job_history.h"
#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"

namespace baton::supervisor {

// One job as the renderer sees it. `live` and `history` are null when no worker runs (a job at
// rest has its history on disk only, and the renderer never reads files).
struct metrics_job {
  const job_record* record = nullptr;
  const live_status* live = nullptr;
  const job_history* history = nullptr;
  std::optional<std::int64_t> soft_limit_mib;
  std::optional<std::int64_t> hard_limit_mib;
};

struct metrics_snapshot {
  std::int64_t now_ms = 0;  // unix time, for ages
  double uptime_seconds = 0;
  std::optional<std::uint64_t> daemon_rss_bytes;  // unset where the OS would not say
  std::vector<metrics_job> jobs;
};

// The Content-Type of the answer.
inline constexpr std::string_view metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

std::string render_metrics(const metrics_snapshot& s);

// A label value as the exposition format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);

}  // namespace baton::supervisor
