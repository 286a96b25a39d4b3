// A job's status as the control API answers it (`GET /v1/jobs/<id>`, `baton status --json`):
// built from the job's record and, while a worker runs, the runner's live progress. Pure but for
// worker_log_view, which reads the tail of the job's log through the env it is given: the daemon
// owns the record and the runner and passes them in.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/job_log.h"
#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"
#include "supervisor/job_store.h"
#include "supervisor/leak_rate.h"

namespace baton::supervisor {

// A job's status as the API returns it: the record's JSON plus `live` progress (null when no
// worker runs), the job's memory limits, the overall peak RSS, restarts by category
// (`restarts`: recycle, failure, user) and the job's leak rate: estimate_leak pooled over every
// worker's steady part (`leak_bytes_per_step`, `leak_ci95_bytes_per_step`, `leak_workers`), or
// null with `leak_note` saying why ("not enough samples (...)").
// The job's worker log as a status shows it: its path, and the last lines a worker wrote
// (worker_log_tail_lines) when shows_log_tail says they explain the job's standing.
struct log_view {
  std::string path;
  std::vector<std::string> tail;  // at most crash_tail_lines, oldest first
};

// A failed job, or one whose newest worker ended by a failure (a crash, a stall, a spawn that
// failed): its last log lines are what the user reads next.
bool shows_log_tail(const job_record& r);

// The log_view of job `r` in `store`: always the path, and the last crash_tail_lines lines when
// shows_log_tail(r). `baton status` (through the daemon) and `baton run` both show this.
log_view worker_log_view(os::env& e, const job_store& store, const job_record& r);

// Adds the job's leak (job_leak) to a job document: `leak_bytes_per_step`,
// `leak_ci95_bytes_per_step`, `leak_workers`, and `leak_note` saying why when there is none.
// Status and `run --json` both write it through here, so the two cannot drift apart.
void add_leak_fields(nlohmann::json& doc, const job_record& r);

// Adds `log_path` and `log_tail` (null when there are no lines) to a job document.
void add_log_fields(nlohmann::json& doc, const log_view& log);

// With `log` (null: the fields are left out), add_log_fields.
nlohmann::json job_status_json(const job_record& r, const live_status* live,
                               std::optional<std::int64_t> soft_limit_mib,
                               std::optional<std::int64_t> hard_limit_mib,
                               const log_view* log = nullptr);

// The steady part of a shard's recorded curve (its downsampled `rss` points).
leak_sums shard_leak_sums(const shard_record& s);

// The job's leak rate over all its workers' recorded curves.
result<leak_estimate> job_leak(const job_record& r);

// {"recycle": n, "failure": n, "user": n} from the record's exits (restart_category).
nlohmann::json restarts_json(const job_record& r);

// One job of the list call (`GET /v1/jobs`): id, state, step and the RSS beside the budget (null
// limits when the job has none). The daemon and `baton run --dashboard` answer with the same.
nlohmann::json job_list_item(const job_record& r, const live_status* live,
                             std::optional<std::int64_t> soft_limit_mib,
                             std::optional<std::int64_t> hard_limit_mib);

// The logs call's answer (`GET /v1/jobs/{id}/logs?offset=N`) for a chunk read from the job's log.
nlohmann::json job_logs_json(const std::string& id, log_chunk chunk, job_state state);

}  // namespace baton::supervisor
