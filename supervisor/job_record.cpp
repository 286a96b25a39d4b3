#include "supervisor/job_record.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

namespace baton::supervisor {

namespace {

constexpr std::array<std::pair<job_state, std::string_view>, 8> job_state_names{{
    {job_state::queued, "queued"},
    {job_state::running, "running"},
    {job_state::waiting, "waiting"},
    {job_state::backoff, "backoff"},
    {job_state::completed, "completed"},
    {job_state::failed, "failed"},
    {job_state::cancelled, "cancelled"},
    {job_state::paused, "paused"},
}};

constexpr std::array<std::pair<exit_cause, std::string_view>, 9> exit_cause_names{{
    {exit_cause::completed, "completed"},
    {exit_cause::memory_soft, "memory_soft"},
    {exit_cause::memory_budget, "memory_budget"},
    {exit_cause::memory_hard, "memory_hard"},
    {exit_cause::crashed, "crashed"},
    {exit_cause::stalled, "stalled"},
    {exit_cause::stopped, "stopped"},
    {exit_cause::cancelled, "cancelled"},
    {exit_cause::spawn_failed, "spawn_failed"},
}};

template <class Enum, std::size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& table, Enum v) {
  for (const auto& [value, name] : table) {
    if (value == v) return name;
  }
  return "unknown";
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <class Enum, std::size_t N>
result<Enum> parse_name(const std::array<std::pair<Enum, std::string_view>, N>& table,
                        std::string_view s, std::string_view what) {
  for (const auto& [value, name] : table) {
    if (name == s) return value;
  }
  return make_error(std::string(what) + ": unknown value \"" + std::string(s) + "\"");
}

// Reads a required field of a given JSON type, naming the path when it is missing or mistyped.
class reader {
 public:
  explicit reader(std::string prefix) : prefix_(std::move(prefix)) {}

  const nlohmann::json* field(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end()) {
      fail(std::string(key) + ": missing");
      return nullptr;
    }
    return &*it;
  }

  std::int64_t integer(const nlohmann::json& j, const char* key) {
    const auto* f = field(j, key);
    if (f == nullptr) return 0;
    if (!f->is_number_integer()) {
      fail(std::string(key) + ": expected an integer");
      return 0;
    }
    return f->get<std::int64_t>();
  }

  double number(const nlohmann::json& j, const char* key) {
    const auto* f = field(j, key);
    if (f == nullptr) return 0;
    if (!f->is_number()) {
      fail(std::string(key) + ": expected a number");
      return 0;
    }
    return f->get<double>();
  }

  // Absent (a record older than the field) or null: unset.
  std::optional<double> optional_number(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) {
      fail(std::string(key) + ": expected a number or null");
      return std::nullopt;
    }
    return it->get<double>();
  }

  std::string string(const nlohmann::json& j, const char* key) {
    const auto* f = field(j, key);
    if (f == nullptr) return {};
    if (!f->is_string()) {
      fail(std::string(key) + ": expected a string");
      return {};
    }
    return f->get<std::string>();
  }

  const nlohmann::json* array(const nlohmann::json& j, const char* key) {
    const auto* f = field(j, key);
    if (f != nullptr && !f->is_array()) {
      fail(std::string(key) + ": expected an array");
      return nullptr;
    }
    return f;
  }

  const nlohmann::json* object(const nlohmann::json& j, const char* key) {
    const auto* f = field(j, key);
    if (f != nullptr && !f->is_object()) {
      fail(std::string(key) + ": expected an object");
      return nullptr;
    }
    return f;
  }

  void fail(const std::string& message) {
    if (!error_) error_ = prefix_ + message;
  }
  const std::optional<std::string>& error() const { return error_; }

 private:
  std::string prefix_;
  std::optional<std::string> error_;
};

}  // namespace

std::string_view to_string(job_state s) { return name_of(job_state_names, s); }
std::string_view to_string(exit_cause c) { return name_of(exit_cause_names, c); }
result<job_state> parse_job_state(std::string_view s) {
  return parse_name(job_state_names, s, "job state");
}
result<exit_cause> parse_exit_cause(std::string_view s) {
  return parse_name(exit_cause_names, s, "exit cause");
}

bool is_terminal(job_state s) {
  return s == job_state::completed || s == job_state::failed || s == job_state::cancelled;
}

bool counts_as_failure(exit_cause c) {
  return c == exit_cause::crashed || c == exit_cause::stalled || c == exit_cause::spawn_failed;
}

nlohmann::json shard_json(const shard_record& s) {
  nlohmann::json rss = nlohmann::json::array();
  for (const auto& p : s.rss) rss.push_back({p.t_ms, p.bytes, p.step});
  return {
      {"index", s.index},
      {"attempt", s.attempt},
      {"pid", s.pid},
      {"start_step", s.start_step},
      {"end_step", s.end_step},
      {"started_ms", s.started_ms},
      {"ended_ms", s.ended_ms},
      {"cause", s.cause ? nlohmann::json(to_string(*s.cause)) : nlohmann::json(nullptr)},
      {"detail", s.detail},
      {"peak_rss_bytes", s.peak_rss_bytes},
      {"leak_bytes_per_step", optional_json(s.leak_bytes_per_step)},
      {"leak_ci95_bytes_per_step", optional_json(s.leak_ci95_bytes_per_step)},
      {"rss", std::move(rss)},
  };
}

nlohmann::json to_json(const job_record& r) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : r.shards) shards.push_back(shard_json(s));
  nlohmann::json out = {
      {"id", r.id},
      {"name", r.name},
      {"state", to_string(r.state)},
      {"diagnosis", r.diagnosis},
      {"created_ms", r.created_ms},
      {"updated_ms", r.updated_ms},
      {"total_steps", r.total_steps},
      {"checkpoint_step", r.checkpoint_step},
      {"checkpoint_path", r.checkpoint_path},
      {"consecutive_failures", r.consecutive_failures},
      {"exits_by_cause", r.exits_by_cause},
      {"metrics", r.metrics},
      {"shards", std::move(shards)},
  };
  if (r.owner) {
    out["owner"] = {{"uid", r.owner->uid}, {"gid", r.owner->gid}, {"groups", r.owner->groups}};
    if (r.owner->path) out["owner"]["path"] = *r.owner->path;
  }
  return out;
}

result<job_record> job_record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("job record: expected an object");
  reader rd("job record: ");
  job_record r;
  r.id = rd.string(j, "id");
  r.name = rd.string(j, "name");
  if (auto s = parse_job_state(rd.string(j, "state")); s) {
    r.state = *s;
  } else {
    rd.fail(s.error().message);
  }
  r.diagnosis = rd.string(j, "diagnosis");
  r.created_ms = rd.integer(j, "created_ms");
  r.updated_ms = rd.integer(j, "updated_ms");
  r.total_steps = rd.integer(j, "total_steps");
  r.checkpoint_step = rd.integer(j, "checkpoint_step");
  r.checkpoint_path = rd.string(j, "checkpoint_path");
  r.consecutive_failures = static_cast<int>(rd.integer(j, "consecutive_failures"));
  if (const auto* m = rd.object(j, "exits_by_cause")) {
    for (const auto& [k, v] : m->items()) {
      if (!v.is_number_integer()) {
        rd.fail("exits_by_cause." + k + ": expected an integer");
        continue;
      }
      r.exits_by_cause[k] = v.get<int>();
    }
  }
  if (const auto* m = rd.object(j, "metrics")) {
    for (const auto& [k, v] : m->items()) {
      // JSON has no NaN: a worker's "no loss yet" (the first progress of an epoch) is written
      // as null, as in the worker protocol, and must read back or the record never verifies.
      if (v.is_null()) {
        r.metrics[k] = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      if (!v.is_number()) {
        rd.fail("metrics." + k + ": expected a number or null");
        continue;
      }
      r.metrics[k] = v.get<double>();
    }
  }
  // Optional: records from before owners have none (the job is then the daemon's user's).
  if (const auto it = j.find("owner"); it != j.end()) {
    const auto id_ok = [](const nlohmann::json& v) {
      return v.is_number_unsigned() ||
             (v.is_number_integer() && v.get<std::int64_t>() >= 0 &&
              v.get<std::int64_t>() <= std::numeric_limits<std::uint32_t>::max());
    };
    const auto& o = *it;
    const auto uid = o.is_object() ? o.find("uid") : o.end();
    const auto gid = o.is_object() ? o.find("gid") : o.end();
    const auto groups = o.is_object() ? o.find("groups") : o.end();
    const auto path = o.is_object() ? o.find("path") : o.end();
    if (!o.is_object() || uid == o.end() || gid == o.end() || groups == o.end() || !id_ok(*uid) ||
        !id_ok(*gid) || !groups->is_array() ||
        !std::all_of(groups->begin(), groups->end(), id_ok)) {
      rd.fail("owner: expected {\"uid\": N, \"gid\": N, \"groups\": [N, ...]}");
    } else if (path != o.end() && !path->is_string()) {
      rd.fail("owner.path: expected a string");
    } else {
      job_owner owner;
      owner.uid = uid->get<std::uint32_t>();
      owner.gid = gid->get<std::uint32_t>();
      for (const auto& g : *groups) owner.groups.push_back(g.get<std::uint32_t>());
      if (path != o.end()) owner.path = path->get<std::string>();
      r.owner = std::move(owner);
    }
  }
  if (const auto* shards = rd.array(j, "shards")) {
    for (std::size_t i = 0; i < shards->size(); ++i) {
      const auto& sj = (*shards)[i];
      reader sr("job record: shards[" + std::to_string(i) + "].");
      if (!sj.is_object()) {
        rd.fail("shards[" + std::to_string(i) + "]: expected an object");
        break;
      }
      shard_record s;
      s.index = sr.integer(sj, "index");
      s.attempt = sr.integer(sj, "attempt");
      s.pid = sr.integer(sj, "pid");
      s.start_step = sr.integer(sj, "start_step");
      s.end_step = sr.integer(sj, "end_step");
      s.started_ms = sr.integer(sj, "started_ms");
      s.ended_ms = sr.integer(sj, "ended_ms");
      if (const auto* c = sr.field(sj, "cause"); c != nullptr && !c->is_null()) {
        if (!c->is_string()) {
          sr.fail("cause: expected a string or null");
        } else if (auto cause = parse_exit_cause(c->get<std::string>()); cause) {
          s.cause = *cause;
        } else {
          sr.fail("cause: " + cause.error().message);
        }
      }
      s.detail = sr.string(sj, "detail");
      s.peak_rss_bytes = sr.integer(sj, "peak_rss_bytes");
      s.leak_bytes_per_step = sr.optional_number(sj, "leak_bytes_per_step");
      s.leak_ci95_bytes_per_step = sr.optional_number(sj, "leak_ci95_bytes_per_step");
      if (const auto* rss = sr.array(sj, "rss")) {
        for (const auto& p : *rss) {
          if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() ||
              !p[1].is_number_integer() || !p[2].is_number_integer()) {
            sr.fail("rss: expected [t_ms, bytes, step] integer triples");
            break;
          }
          s.rss.push_back(
              {p[0].get<std::int64_t>(), p[1].get<std::int64_t>(), p[2].get<std::int64_t>()});
        }
      }
      if (sr.error()) return make_error(*sr.error());
      r.shards.push_back(std::move(s));
    }
  }
  if (rd.error()) return make_error(*rd.error());
  return r;
}

void add_rss_point(shard_record& shard, rss_point s) {
  shard.peak_rss_bytes = std::max(shard.peak_rss_bytes, s.bytes);
  auto& curve = shard.rss;
  if (curve.size() >= 2) {
    // After a halving the curve's spacing has doubled; later samples keep that spacing so the
    // curve stays evenly spread in time.
    const auto gap =
        (curve.back().t_ms - curve.front().t_ms) / static_cast<std::int64_t>(curve.size() - 1);
    if (s.t_ms - curve.back().t_ms < gap * 3 / 4) return;
  }
  if (curve.size() >= max_rss_samples) {
    std::size_t out = 0;
    for (std::size_t i = 0; i < curve.size(); i += 2) curve[out++] = curve[i];
    curve.resize(out);
  }
  curve.push_back(s);
}

}  // namespace baton::supervisor
