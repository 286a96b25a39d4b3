#include "supervisor/job_status.h"

#include <algorithm>
#include <vector>

#include "supervisor/leak_rate.h"

namespace baton::supervisor {

using json = nlohmann::json;

namespace {

std::optional<double> live_leak_rate(const shard_record& s) {
  std::vector<rss_sample> samples;
  samples.reserve(s.rss.size());
  for (const auto& p : s.rss) {
    samples.push_back(
        {p.step, p.t_ms, static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.bytes))});
  }
  return leak_bytes_per_step(samples);
}

}  // namespace

json job_status_json(const job_record& r, const live_status* live,
                     std::optional<std::int64_t> soft_limit_mib,
                     std::optional<std::int64_t> hard_limit_mib) {
  json j = to_json(r);
  std::int64_t peak = 0;
  for (const auto& s : r.shards) peak = std::max(peak, s.peak_rss_bytes);
  j["peak_rss_bytes"] = peak;
  json leak = nullptr;
  if (!r.shards.empty()) {
    const auto& s = r.shards.back();
    if (s.cause) {
      leak = s.leak_bytes_per_step;
    } else if (auto rate = live_leak_rate(s)) {
      leak = *rate;
    }
  }
  j["leak_bytes_per_step"] = leak;
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
  return j;
}

}  // namespace baton::supervisor
