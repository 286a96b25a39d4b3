// A job's history is what the supervisor saw of it over its whole run, for plots, `/metrics` and
// the history API (`GET /v1/jobs/{id}/history?since=N`): every RSS sample of every worker, every
// progress report (step, epoch, loss, metrics) and every event (spawn, recycle with its cause,
// crash, backoff, checkpoint, pause, resume, ...). Each entry gets a sequence number, one counter
// for all three kinds, so a client polls with the newest one it has as a cursor.
//
// Bounded in size however long the job runs: RSS samples and progress reports are kept in
// halving-resolution tiers. Tier 0 holds the newest `tier_capacity` entries at full resolution;
// when a tier is full its two oldest entries merge into one entry of the next tier, so tier k
// entries stand for 2^k raw ones and a series of n entries keeps about
// tier_capacity * log2(n / tier_capacity). A merged progress entry keeps the first and last step,
// the last loss and metrics and the loss extremes; a merged RSS entry keeps the last sample and
// the bytes extremes, and two samples of different workers never merge (so the sawtooth's drops
// at each recycle stay visible at every age). Events are few (a handful per worker) and are kept
// at full resolution up to `max_events`, the oldest dropped past that.
//
// Persisted in the job folder as one JSON object per line (history.jsonl), written through the env
// only: entries are appended as they come, samples in batches of up to a second and events at
// once (no rewrite per sample, no fsync: a lost tail costs a second of samples, never the job).
// Once `compact_after_bytes` were appended since the last compaction, the file is replaced
// atomically by the bounded in-memory state. Loading replays the lines through the same tiers, so a
// reloaded history is the one that was written; a torn last line (a crash mid-append) or any line
// that does not parse is skipped with a note, never a failure.
//
// The owner (the daemon for a job it supervises, `baton run` for its job) holds the history and
// hands it to the job runner, which feeds it on the io thread; nothing here is thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "os/env.h"
#include "supervisor/job_record.h"

namespace baton::supervisor {

enum class history_event_kind {
  spawn,       // a worker started
  recycle,     // a worker ended on a memory limit or budget: planned work
  crash,       // a worker crashed, stalled, or could not be started
  stop,        // a worker was stopped by a supervisor shutdown or the user's Ctrl-C
  completed,   // a worker finished its shard (or the job)
  backoff,     // the job waits before retrying after a failure
  checkpoint,  // a checkpoint verified
  pause,
  resume,
  cancel,
};
std::string_view to_string(history_event_kind k);
result<history_event_kind> parse_history_event_kind(std::string_view s);

// Which event a worker's exit cause is.
history_event_kind event_kind_for(exit_cause c);
// Which restart a worker's exit cause counts as for `baton_job_restarts_total{cause=...}`:
// "recycle" (memory limits and budgets), "failure" (crash, stall, spawn failure), "user" (stopped
// by Ctrl-C or a daemon stop, resumed later); empty for a completed or cancelled worker, after
// which no worker follows.
std::string_view restart_category(exit_cause c);

struct history_rss {
  std::int64_t seq = 0;
  std::int64_t t_ms = 0;  // unix time
  std::int64_t pid = 0;
  std::int64_t shard = 0;  // index of the worker's shard record
  std::int64_t step = 0;   // newest step the worker had reported
  std::uint64_t bytes = 0;
  // Over the raw samples this entry stands for (all three equal for a raw sample).
  std::uint64_t min_bytes = 0;
  std::uint64_t max_bytes = 0;
  std::int64_t count = 1;
};

struct history_progress {
  std::int64_t seq = 0;
  std::int64_t t_ms = 0;
  std::int64_t step = 0;        // the last report's
  std::int64_t first_step = 0;  // the first report's this entry stands for
  std::int64_t epoch = 0;
  std::optional<double> loss;  // unset when the worker sent none (or not a finite number)
  std::optional<double> loss_min;
  std::optional<double> loss_max;
  std::map<std::string, double> metrics;  // the last report's, finite values only
  std::int64_t count = 1;
};

struct history_event {
  std::int64_t seq = 0;
  std::int64_t t_ms = 0;
  history_event_kind kind = history_event_kind::spawn;
  std::int64_t pid = 0;  // 0 when no worker is involved
  std::int64_t shard = -1;
  std::int64_t step = 0;
  std::string cause;  // the exit cause (to_string(exit_cause)) for worker exits
  std::string detail;
};

struct history_limits {
  std::size_t tier_capacity = 256;
  std::size_t max_events = 20000;
  std::uint64_t compact_after_bytes = std::uint64_t{512} << 10;
  // RSS samples and progress reports are written in batches: once the oldest pending one is
  // this old (by the entries' own times) or this many bytes are pending. Events are written at
  // once. 8 jobs at 10 reports a second cost 8 writes a second instead of 110.
  std::int64_t flush_after_ms = 1000;
  std::size_t flush_bytes = 64 << 10;
};

// What a history answer holds: entries with seq > since, oldest first, and the cursor to ask
// with next time (the newest seq). A `next` below `since` means the history started over (its
// file was lost): the client asks again from 0.
struct history_page {
  std::int64_t since = 0;
  std::int64_t next = 0;
  std::vector<history_rss> rss;
  std::vector<history_progress> progress;
  std::vector<history_event> events;
};

class job_history {
 public:
  // The file's usual place: <job folder>/history.jsonl.
  static std::filesystem::path file_in(const std::filesystem::path& job_dir);

  // Loads `file` if it exists (a missing file is an empty history) and appends to it from then
  // on. Fails only when the file exists and cannot be read; bad lines become load_notes().
  static result<job_history> open(os::env& e, std::filesystem::path file,
                                  history_limits limits = {});
  // The same, read only: nothing is ever written (the API reading a job at rest).
  static result<job_history> load(os::env& e, std::filesystem::path file,
                                  history_limits limits = {});

  job_history(job_history&&) noexcept;
  job_history& operator=(job_history&&) noexcept;
  ~job_history();

  // Each adds one entry, gives it the next sequence number and appends it to the file (RSS and
  // progress in batches: history_limits). An error means entries are kept in memory but not on
  // disk (the caller logs it; the job goes on).
  status add_rss(std::int64_t t_ms, std::int64_t pid, std::int64_t shard, std::int64_t step,
                 std::uint64_t bytes);
  status add_progress(std::int64_t t_ms, std::int64_t step, std::int64_t epoch,
                      std::optional<double> loss, const std::map<std::string, double>& metrics);
  status add_event(std::int64_t t_ms, history_event_kind kind, std::int64_t pid, std::int64_t shard,
                   std::int64_t step, std::string cause = {}, std::string detail = {});

  std::int64_t last_seq() const { return seq_; }
  history_page page(std::int64_t since) const;
  // Entries held in memory, all kinds.
  std::size_t size() const;
  // Bytes in the file as written by this object (what it loaded plus what it wrote; not the
  // pending batch).
  std::uint64_t file_bytes() const { return file_bytes_; }
  const std::vector<std::string>& load_notes() const { return notes_; }
  // The newest RSS sample, if any: the live value for /metrics.
  std::optional<history_rss> newest_rss() const;
  // The newest event of this kind still held (the newest checkpoint, for its age).
  std::optional<history_event> newest_event(history_event_kind k) const;

  // Replaces the file with the in-memory state now (also done on its own past the threshold).
  status compact();
  // Writes the pending batch now (also done at destruction).
  status flush();

 private:
  job_history(os::env& e, std::filesystem::path file, history_limits limits, bool writable);
  status load_file();
  void replay_line(std::string_view line, std::size_t line_no, bool last_without_newline);
  void push_rss(history_rss r, std::size_t tier);
  void push_progress(history_progress p, std::size_t tier);
  void push_event(history_event ev);
  status append_line(const nlohmann::json& j, std::int64_t t_ms);

  os::env* env_;
  std::filesystem::path file_;
  history_limits limits_;
  bool writable_ = false;
  std::int64_t seq_ = 0;
  std::vector<std::deque<history_rss>> rss_;  // rss_[k]: tier k, oldest first; tier 0 newest
  std::vector<std::deque<history_progress>> progress_;
  std::deque<history_event> events_;
  std::unique_ptr<os::writable_file> out_;
  bool need_newline_ = false;  // the file ends in a torn line: start the next on a fresh one
  std::string pending_;        // whole lines not yet written
  std::int64_t pending_since_ms_ = 0;
  std::uint64_t file_bytes_ = 0;
  std::uint64_t appended_since_compaction_ = 0;
  std::vector<std::string> notes_;
};

// The event a job's state change is, if any: backoff, pause, resume (of a paused, failed or
// cancelled job) and, `at_rest`, a cancel (with a worker, its exit says it). Worker exits are
// added by the runner at record_exit, with their cause; this covers what only the state says.
std::optional<history_event_kind> state_change_event(job_state before, job_state after,
                                                     bool at_rest);
// That event, if any, added to `h`.
status note_state_change(job_history& h, job_state before, const job_record& after,
                         std::int64_t now_ms, bool at_rest = false);

// The history answer's JSON: {"since", "next", "rss": [...], "progress": [...], "events": [...]}
// (documented in protocol/README.md, Control API).
nlohmann::json to_json(const history_page& p);
nlohmann::json to_json(const history_rss& r);
nlohmann::json to_json(const history_progress& p);
nlohmann::json to_json(const history_event& e);

}  // namespace baton::supervisor
