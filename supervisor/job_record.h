// A job record is the supervisor's durable memory of one job: its state, where its newest good
// checkpoint is, and the history of every shard (worker process) it ran, with the exit cause, the
// RSS curve and the measured leak rate. The job store persists it; the runner owns the live copy.
// The JSON form is what `baton status --json` prints (documented in protocol/README.md).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::supervisor {

// The states a user sees (`baton status`); the job machine (job_machine.h) decides them. A job
// between two planned workers (a shard done, a memory recycle) is `waiting`; one waiting to
// retry after a failure is in `backoff`.
enum class job_state { queued, running, waiting, backoff, completed, failed, cancelled, paused };

// Why a worker process ended. Memory recycles are planned work, not failures.
enum class exit_cause {
  completed,    // finished its shard (or the job) and exited 0
  memory_soft,  // passed the soft limit, was asked to stop, checkpointed
  // Reached the step or time budget learned from a hard-limit kill, was asked to stop,
  // checkpointed. Records written before this cause existed call it memory_soft.
  memory_budget,
  memory_hard,  // passed the hard limit, killed at once
  crashed,      // exited non-zero or died from a signal on its own
  stalled,      // sent nothing for stall_timeout and was killed as hung
  stopped,      // stopped because the supervisor was shutting down or the user pressed Ctrl-C
  cancelled,    // stopped because the job was cancelled
  spawn_failed  // could not be started at all
};

std::string_view to_string(job_state s);
std::string_view to_string(exit_cause c);
result<job_state> parse_job_state(std::string_view s);
result<exit_cause> parse_exit_cause(std::string_view s);

// Terminal states never change again; a daemon restart leaves them alone.
bool is_terminal(job_state s);
// Failures count toward the crash-loop limit; recycles and requested stops do not.
bool counts_as_failure(exit_cause c);

struct rss_point {
  std::int64_t t_ms = 0;  // since the shard started
  std::int64_t bytes = 0;
  std::int64_t step = 0;  // newest step the worker had reported at that time
};

struct shard_record {
  std::int64_t index = 0;    // shard number: start_step / shard_steps
  std::int64_t attempt = 0;  // 0 for the first worker of this shard, then 1, 2, ...
  std::int64_t pid = 0;
  std::int64_t start_step = 0;
  std::int64_t end_step = 0;    // newest verified checkpoint step when the worker ended
  std::int64_t started_ms = 0;  // unix time
  std::int64_t ended_ms = 0;
  std::optional<exit_cause> cause;  // unset while running
  std::string detail;               // "exit code 1", "signal 9", "rss 2101 MiB > hard 2048 MiB"
  std::int64_t peak_rss_bytes = 0;  // 0: no sample landed and the worker never spoke
  // estimate_leak over this worker's steady part (leak_rate.h), set when it ended; unset when
  // there were not enough samples. Records written before the steady part existed hold the raw
  // slope, or 0 for fewer than five samples.
  std::optional<double> leak_bytes_per_step;
  std::optional<double> leak_ci95_bytes_per_step;
  std::vector<rss_point> rss;  // downsampled to at most max_rss_samples
};

inline constexpr std::size_t max_rss_samples = 256;

// The part of a job record that is the job machine's persisted state: only the machine's
// transition() changes it (the runner and the daemon store what it returns), so there is one copy
// of where a job stands and no mirror to keep in step.
struct job_standing {
  job_state state = job_state::queued;
  std::string diagnosis;             // why it failed or paused
  std::int64_t checkpoint_step = 0;  // newest verified checkpoint
  int consecutive_failures = 0;      // reset when the checkpoint advances
  friend bool operator==(const job_standing&, const job_standing&) = default;
};

// Who submitted a job, from the control socket's peer credentials: the only uid (besides root
// and the daemon's) that may see and change it, and with jobs_run_as = "submitter" the user its
// workers run as, with exactly these groups.
struct job_owner {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::vector<std::uint32_t> groups;  // supplementary
  // The submitter's PATH when their client sent it (control_api.h, submit_call::path): the
  // workers' PATH whenever they run as this user.
  std::optional<std::string> path = std::nullopt;
  friend bool operator==(const job_owner&, const job_owner&) = default;
};

struct job_record : job_standing {
  std::string id;
  std::string name;
  // Unset in records written before jobs had owners: such a job is the daemon's user's.
  std::optional<job_owner> owner;
  std::int64_t created_ms = 0;
  std::int64_t updated_ms = 0;
  std::int64_t total_steps = 0;
  std::string checkpoint_path;  // the file of checkpoint_step
  std::map<std::string, int> exits_by_cause;
  std::map<std::string, double> metrics;  // newest loss/accuracy/... reported
  std::vector<shard_record> shards;
  std::int64_t seq = 0;  // state-file generation; kept by the job store, not part of the JSON
};

// The version of the job and shard JSON that the CLI and the control API emit (`baton run
// --json`, `baton status --json`, GET /v1/jobs and /v1/jobs/{id}: the documents carry it as a
// top-level "schema_version"). Raised when a field changes meaning or type or goes away; a new
// field does not raise it. The stored record (to_json below) does not carry it: the job store
// has its own compatibility rules (job_record_from_json).
inline constexpr int json_schema_version = 1;

// A shard as every JSON document shows it (the stored record, run --json, status --json): one
// function, so the same worker has the same field names and types wherever it is printed.
nlohmann::json shard_json(const shard_record& s);

nlohmann::json to_json(const job_record& r);
// Strict: a record that does not have the expected shape is an error naming the field.
result<job_record> job_record_from_json(const nlohmann::json& j);

// Adds a sample, halving the resolution (dropping every other sample) when the curve is full, so
// a shard of any length keeps an even-spread curve of bounded size.
void add_rss_point(shard_record& shard, rss_point s);

}  // namespace baton::supervisor
