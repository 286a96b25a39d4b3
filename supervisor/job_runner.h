// A job runner drives one job through its shards: it starts a fresh worker process per shard,
// reads the worker's protocol lines, verifies every checkpoint it reports, samples the memory of
// the worker's whole process tree, and feeds all of it to the pure shard state machine
// (shard_machine.h), carrying out the actions it returns. The runner owns the live job record and
// persists it through the job store; the caller owns the io_context, the store and the runner,
// and calls every method on the io_context's thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "protocol/job_spec.h"
#include "supervisor/job_record.h"
#include "supervisor/job_store.h"
#include "supervisor/shard_machine.h"

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
};

class job_runner {
 public:
  job_runner(boost::asio::io_context& io, job_store& store, job_record record,
             protocol::job_spec spec, runner_options options);
  ~job_runner();  // kills a worker that still runs (its group and descendants)
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  // Starts (or resumes after a supervisor restart) a queued, running or backoff job. A paused
  // job waits for resume(); a terminal one is at rest at once.
  void start();
  void cancel();
  // Asks the worker to checkpoint and stop; the job rests in `paused` and resumes with resume().
  void pause(std::string reason);
  void resume();

  bool at_rest() const;
  const job_record& record() const;
  const live_status& live() const;
  shard_phase phase() const;

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

}  // namespace baton::supervisor

namespace baton::supervisor {

// Checks a checkpoint a worker reported before the job counts it: the path must name a file
// directly inside the job's checkpoint folder, and the file must decode and verify, with the
// step and digest the worker announced.
status verify_reported_checkpoint(env& e, const std::filesystem::path& checkpoint_dir,
                                  const std::string& path, std::int64_t step,
                                  const std::string& digest);

// The folder a worker of shard `shard_index` writes folder checkpoints into:
// <checkpoint dir>/.staging-<shard index>, made absolute.
std::filesystem::path staging_dir_for(const std::filesystem::path& checkpoint_dir,
                                      std::int64_t shard_index);

// Checks a folder announcement (a checkpoint message without a digest) before anything is
// sealed: an absolute path naming a real folder (not a symlink) directly inside `staging_dir`,
// with a valid name, and a step past `newest_step` (the job's newest verified checkpoint).
status check_folder_announcement(env& e, const std::filesystem::path& staging_dir,
                                 const std::string& path, std::int64_t step,
                                 std::int64_t newest_step);

}  // namespace baton::supervisor
