// What `baton run` shows: a one-line live progress view of the running shard, and the closing
// summary (a table for people, one JSON object for scripts). Pure formatting of a job record and
// the live status, so the wording is tested without running a job.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"

namespace baton::supervisor {

struct progress_view {
  const job_record& record;
  const live_status& live;
  std::int64_t soft_limit_mib = 0;  // 0: none
  std::int64_t hard_limit_mib = 0;
  double steps_per_sec = 0.0;  // measured over this run, for the ETA
};

// "shard 3 (pid 4242) | step 471/3140 epoch 3 | loss 0.2345 acc 0.912 | rss 412/1024 MiB | ..."
std::string format_progress_line(const progress_view& v);

// "1h02m", "3m07s", "12.4s".
std::string format_duration(double seconds);
std::string format_mib(std::int64_t bytes);

std::string format_summary(const job_record& r, double wall_seconds);
nlohmann::json summary_json(const job_record& r, double wall_seconds);

}  // namespace baton::supervisor
