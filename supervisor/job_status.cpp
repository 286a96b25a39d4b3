#include "supervisor/job_status.h"

#include <algorithm>
#include <vector>

#include "supervisor/run_report.h"

namespace baton::supervisor {

using json = nlohmann::json;

leak_sums shard_leak_sums(const shard_record& s) {
  leak_tracker t;
  for (const auto& p : s.rss)
    t.add(p.step, static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.bytes)));
  return t.steady();
}

result<leak_estimate> job_leak(const job_record& r) {
  std::vector<leak_sums> workers;
  workers.reserve(r.shards.size());
  for (const auto& s : r.shards) workers.push_back(shard_leak_sums(s));
  return estimate_leak(workers);
}

json restarts_json(const job_record& r) {
  const auto c = count_restarts(r);
  return {{"recycle", c.recycles}, {"failure", c.failures}, {"user", c.user_stops}};
}

bool shows_log_tail(const job_record& r) {
  if (r.state == job_state::failed) return true;
  if (r.shards.empty() || !r.shards.back().cause) return false;
  return counts_as_failure(*r.shards.back().cause);
}

void add_leak_fields(json& doc, const job_record& r) {
  if (auto leak = job_leak(r)) {
    doc["leak_bytes_per_step"] = leak->bytes_per_step;
    doc["leak_ci95_bytes_per_step"] = leak->ci95_bytes_per_step;
    doc["leak_workers"] = leak->workers;
    doc["leak_note"] = nullptr;
  } else {
    doc["leak_bytes_per_step"] = nullptr;
    doc["leak_ci95_bytes_per_step"] = nullptr;
    doc["leak_workers"] = 0;
    doc["leak_note"] = leak.error().message;
  }
}

log_view worker_log_view(os::env& e, const job_store& store, const job_record& r) {
  log_view out{store.log_path(r.id).string(), {}};
  if (shows_log_tail(r)) {
    out.tail =
        worker_log_tail_lines(e, store.log_path(r.id), store.job_dir(r.id), crash_tail_lines);
  }
  return out;
}

void add_log_fields(json& doc, const log_view& log) {
  doc["log_path"] = log.path;
  doc["log_tail"] = log.tail.empty() ? json(nullptr) : json(log.tail);
}

json job_status_json(const job_record& r, const live_status* live,
                     std::optional<std::int64_t> soft_limit_mib,
                     std::optional<std::int64_t> hard_limit_mib, const log_view* log) {
  json j = to_json(r);
  j["schema_version"] = json_schema_version;
  std::int64_t peak = 0;
  for (const auto& s : r.shards) peak = std::max(peak, s.peak_rss_bytes);
  j["peak_rss_bytes"] = peak;
  add_leak_fields(j, r);
  j["restarts"] = restarts_json(r);
  j["soft_limit_mib"] = soft_limit_mib ? json(*soft_limit_mib) : json(nullptr);
  j["hard_limit_mib"] = hard_limit_mib ? json(*hard_limit_mib) : json(nullptr);
  j["step"] = live ? live->step : r.checkpoint_step;
  if (live) {
    j["live"] = {{"pid", live->pid},
                 {"step", live->step},
                 {"total_steps", live->total_steps},
                 {"epoch", live->epoch},
                 {"loss", live->loss},
                 {"metrics", live->metrics},
                 {"samples_per_sec", live->samples_per_sec},
                 {"rss_bytes", live->rss_bytes}};
  } else {
    j["live"] = nullptr;
  }
  if (log) add_log_fields(j, *log);
  return j;
}

nlohmann::json job_list_item(const job_record& r, const live_status* live,
                             std::optional<std::int64_t> soft_limit_mib,
                             std::optional<std::int64_t> hard_limit_mib) {
  auto opt = [](const std::optional<std::int64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"id", r.id},
          {"name", r.name},
          {"state", to_string(r.state)},
          {"step", live ? live->step : r.checkpoint_step},
          {"checkpoint_step", r.checkpoint_step},
          {"total_steps", r.total_steps},
          {"workers", r.shards.size()},
          {"rss_bytes", live ? live->rss_bytes : 0},
          {"created_ms", r.created_ms},
          {"updated_ms", r.updated_ms},
          {"diagnosis", r.diagnosis},
          {"soft_limit_mib", opt(soft_limit_mib)},
          {"hard_limit_mib", opt(hard_limit_mib)}};
}

nlohmann::json job_logs_json(const std::string& id, log_chunk chunk, job_state state) {
  return {{"id", id},
          {"offset", chunk.offset},
          {"next_offset", chunk.next_offset},
          {"size", chunk.size},
          {"start", chunk.start},
          {"skipped", chunk.skipped},
          {"data", std::move(chunk.data)},
          {"state", to_string(state)}};
}

}  // namespace baton::supervisor
