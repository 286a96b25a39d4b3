// What `baton run` shows: a one-line live progress view of the running shard, and the closing
// summary (a table for people, one JSON object for scripts). Pure formatting of a job record and
// the live status, so the wording is tested without running a job.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"
#include "supervisor/job_status.h"

namespace baton::supervisor {

struct progress_view {
  const job_record& record;
  const live_status& live;
  std::int64_t soft_limit_mib = 0;  // 0: none
  std::int64_t hard_limit_mib = 0;
  double steps_per_sec = 0.0;  // measured over this run, for the ETA
  bool colour = false;         // failures in red (terminal_style.h)
};

// "shard 3 (pid 4242) | step 471/3140 epoch 3 | loss 0.2345 acc 0.912 | rss 412/1024 MiB | ..."
std::string format_progress_line(const progress_view& v);

// "1h02m", "3m07s", "12.4s".
std::string format_duration(double seconds);
std::string format_mib(std::int64_t bytes);
// A peak in MiB without the unit (the column says it), "-" for 0: nothing was measured.
std::string format_peak_mib(std::int64_t bytes);
// A leak rate in MiB per step without the unit (the column or label says it), with its 95%
// interval when known: "1.02 +- 0.03", "0.00 +- 0.01"; "-" when unset (not enough samples).
std::string format_leak_mib(std::optional<double> bytes_per_step,
                            std::optional<double> ci95_bytes_per_step);

// Restarts by what caused them (restart_category): planned recycles apart from failures and
// from user stops, so a healthy recycled job does not read as a crashing one.
struct restart_counts {
  int recycles = 0;
  int failures = 0;
  int user_stops = 0;
};
restart_counts count_restarts(const job_record& r);
// "2 recycles, 0 failures, 1 user stop".
std::string format_restarts(const restart_counts& c);

// `colour`: the job's state and each worker's exit cause in ANSI colour (terminal_style.h).
std::string format_summary(const job_record& r, double wall_seconds, bool colour = false);
// With `log` (null: left out), the job's `log_path` and `log_tail` as status has them.
nlohmann::json summary_json(const job_record& r, double wall_seconds,
                            const log_view* log = nullptr);

}  // namespace baton::supervisor
