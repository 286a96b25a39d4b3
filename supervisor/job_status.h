// A job's status as the control API answers it (`GET /v1/jobs/<id>`, `baton status --json`):
// built from the job's record and, while a worker runs, the runner's live progress. Pure: the
// daemon owns the record and the runner and passes them in; nothing here touches a file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"

namespace baton::supervisor {

// A job's status as the API returns it: the record's JSON plus `live` progress (null when no
// worker runs), the job's memory limits, the current shard's leak rate and the overall peak RSS.
nlohmann::json job_status_json(const job_record& r, const live_status* live,
                               std::optional<std::int64_t> soft_limit_mib,
                               std::optional<std::int64_t> hard_limit_mib);

}  // namespace baton::supervisor
