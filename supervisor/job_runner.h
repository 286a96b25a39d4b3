// A job runner drives one job through its shards: it starts a fresh worker process per shard
// (through a process_launcher), reads the worker's protocol lines, verifies every checkpoint it
// reports, samples the memory of the worker's whole process tree, and feeds all of it to the pure
// job state machine (job_machine.h), carrying out the actions it returns. The runner owns the live
// job record, whose standing is the machine's persisted state, and persists it through the job
// store; every file it touches (checkpoints, the job's log) goes through the env it is given.
// Reading what a worker wrote (verifying a checkpoint, sealing a folder, walking the folder
// before a spawn) happens off the io thread with a deadline (off_thread.h); the worker's later
// lines and its exit wait until the result is in, so the machine sees them in order. The caller
// owns the io_context, the env, the launcher, the store and the runner, and calls every method on
// the io_context's thread; the env must outlive any read the runner abandoned at its deadline.
// Rejected checkpoints are moved aside into the checkpoint folder's rejected/.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "os/env.h"
#include "protocol/checkpoint_folder.h"
#include "protocol/checkpoint_store.h"
#include "protocol/job_spec.h"
#include "supervisor/job_history.h"
#include "supervisor/job_log_writer.h"
#include "supervisor/job_machine.h"
#include "supervisor/job_record.h"
#include "supervisor/job_store.h"
#include "supervisor/process_launcher.h"

namespace boost::asio {
class io_context;
}

namespace baton::supervisor {

// What the worker most recently told us, for progress displays and `baton status`.
struct live_status {
  std::int64_t pid = 0;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  std::int64_t epoch = 0;
  double loss = 0.0;
  std::map<std::string, double> metrics;
  double samples_per_sec = 0.0;
  std::uint64_t rss_bytes = 0;
  std::int64_t shard_started_step = 0;
  std::int64_t shard_started_ms = 0;  // monotonic
};

struct runner_options {
  std::filesystem::path worker_exe;  // the built-in trainer (baton-worker)
  // Called after anything visible changed (progress, state, a sample). May be empty.
  std::function<void()> on_change;
  // Called once the runner is at rest: completed, failed, cancelled or paused, no worker left.
  std::function<void()> on_rest;
  // Supervisor events for the job's log ("worker 123 started at step 157"). May be empty.
  std::function<void(const std::string&)> on_event;
  // What an operator wants in the daemon's own log, not only the job's: every recycle (with its
  // cause, peak and leak rate) and every failure. Also sent to on_event. May be empty.
  std::function<void(const std::string&)> on_notice;
  // The largest checkpoint the runner reads to verify it (a file, or a folder's files together):
  // the daemon's max_checkpoint_mib. A worker decides what it announces; larger is rejected
  // before a byte is read.
  std::uint64_t max_checkpoint_bytes = protocol::default_max_checkpoint_bytes;
  // worker.preload: how long the fork server may take to import its modules (torch on a loaded
  // machine: seconds) before the shard counts as failed to start.
  std::chrono::milliseconds preload_ready_timeout{120000};
  // Every read of the worker's checkpoints (verify, seal, the walk before a spawn) runs off the io
  // thread and is given up after this long, as a rejection.
  std::chrono::milliseconds verify_deadline{60000};
  // Fed with every RSS sample, progress report and event (job_history.h). Owned by the caller,
  // outlives the runner. May be null.
  job_history* history = nullptr;
  // The job log's rotation (daemon settings log_max_mib and log_keep; `baton run`: defaults).
  log_limits log;
  // The worker's stdout and stderr are read on a tick of this period (os::spawn_options
  // read_pace): eight workers reporting ten times a second then wake the daemon four times a
  // second, not eighty. A line is handled at most this much later; nothing waits on that, and
  // a worker's exit ends the pacing. Capped at the job's memory.poll_ms, so that each RSS sample
  // meets a step read since the last one. 0: every line at once.
  std::chrono::milliseconds read_pace{250};
  // Set (jobs_run_as = "submitter"): the user every worker of this job runs as, who also gets
  // each worker's staging folder. Unset: the supervisor's own user.
  std::optional<os::process_credentials> run_as;
  // Each worker's environment before the job's own (BATON_*, worker.env): the login of the user
  // it runs as (job_access.h, worker_login_env). Later entries win, as in os::spawn_options::env.
  std::vector<std::pair<std::string, std::string>> login_env;
};

class job_runner {
 public:
  job_runner(boost::asio::io_context& io, os::env& e, process_launcher& launcher, job_store& store,
             job_record record, protocol::job_spec spec, runner_options options);
  ~job_runner();  // kills a worker that still runs (its group and descendants)
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  // Starts a queued job, from the newest checkpoint that verifies. A paused job waits for
  // resume(); a terminal one is at rest at once. A record left running by a dead supervisor is
  // recovered first (feed_job_at_rest with ev::recovered).
  void start();
  void cancel();
  // Asks the worker to checkpoint and stop; the job rests in `paused` and resumes with resume().
  void pause(std::string reason);
  void resume();

  bool at_rest() const;
  const job_record& record() const;
  const live_status& live() const;
  const job_runtime& runtime() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

// The argv and environment a worker of this job gets (documented in protocol/README.md).
// BATON_RESUME_FROM is record.checkpoint_path made absolute (unset when empty): the runner points
// the record at the checkpoint it verified just before the spawn. BATON_STAGING_DIR is
// staging_dir_for().
struct worker_invocation {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::filesystem::path working_dir;
  // The Job Object commit cap per process on Windows: the hard limit plus a quarter. The
  // supervisor's sampling enforces the hard limit itself (a kill that teaches later workers a
  // step budget); the cap is there for a spike that grows more than a quarter between two samples.
  std::optional<std::uint64_t> memory_backstop_bytes;
};
worker_invocation make_worker_invocation(const protocol::job_spec& spec, const job_store& store,
                                         const job_record& record,
                                         const std::filesystem::path& worker_exe,
                                         std::optional<std::int64_t> max_steps = std::nullopt);

// A job with no runner (the daemon's queued, paused and finished jobs; `baton run`'s record
// before its runner starts) has no worker and no timers: feeds it one event and carries out what
// the machine can ask of it then (persist, close_interrupted_shard, log_event). `wants_slot` says
// it asked for a worker slot (request_slot), which only the caller can give; `saved` is the
// result of a persist (fine if there was none).
struct rest_outcome {
  bool ignored = false;
  bool wants_slot = false;
  status saved;
};
rest_outcome feed_job_at_rest(os::env& e, job_store& store, job_record& record, const event& ev);

// Appends "[baton] <message>" to the job's log through `e` (stamped, rotated: job_log_writer.h).
// Best effort: a log line that cannot be written must not stop the job.
void append_job_log(os::env& e, const job_store& store, const std::string& id,
                    const std::string& message, const log_limits& limits = {});

// Checks a checkpoint a worker reported before the job counts it: the path must name a file
// directly inside the job's checkpoint folder, opened as untrusted (no link, no FIFO or device,
// at most `max_bytes`, resolving inside the folder), and the file must verify as it is streamed
// through in bounded memory, with the step and digest the worker announced. Blocking: the runner
// calls it off the io thread.
//
// On success, when the env tells file identities, the file as it was read and as the path still
// names it afterwards (the same identity): the walk before the next spawn can then trust it
// from a stat (protocol::still_verified). nullopt: no identity, so the next walk reads it again.
result<std::optional<protocol::verified_file>> verify_reported_checkpoint(
    os::env& e, const std::filesystem::path& checkpoint_dir, const std::string& path,
    std::int64_t step, const std::string& digest,
    std::uint64_t max_bytes = protocol::default_max_checkpoint_bytes);

// The last line of the job's log that the worker wrote (stderr or text on stdout, not a
// "[baton]" line), without its stamp, at most 300 bytes, read from the last 8 KiB of the log's
// stream (across a rotation); empty if none. The log's files are opened as untrusted, inside
// their folder (the job's, `job_dir`).
std::string worker_log_tail(os::env& e, const std::filesystem::path& log,
                            const std::filesystem::path& job_dir);
// The same, the last `max_lines` such lines (oldest first): what `baton run` and `baton status`
// show of a crashed worker.
std::vector<std::string> worker_log_tail_lines(os::env& e, const std::filesystem::path& log,
                                               const std::filesystem::path& job_dir,
                                               std::size_t max_lines);

// How many of a crashed worker's last lines `baton run` and `baton status` show.
inline constexpr std::size_t crash_tail_lines = 5;

// The folder a worker of shard `shard_index` writes folder checkpoints into:
// <checkpoint dir>/.staging-<shard index>, made absolute.
std::filesystem::path staging_dir_for(const std::filesystem::path& checkpoint_dir,
                                      std::int64_t shard_index);

// Checks a folder announcement (a checkpoint message without a digest) before anything is
// sealed: an absolute path naming a real folder (not a symlink) directly inside `staging_dir`,
// with a valid name, and a step past `newest_step` (the job's newest verified checkpoint).
status check_folder_announcement(os::env& e, const std::filesystem::path& staging_dir,
                                 const std::string& path, std::int64_t step,
                                 std::int64_t newest_step);

}  // namespace baton::supervisor
