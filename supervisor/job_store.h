// The job store is the supervisor's state directory: one folder per job holding the job's spec
// (normalised, every default filled, absolute paths), its record, its checkpoints and its worker
// log. Records are written through the env with atomic replace into two alternating slots, each
// with a sequence number and a digest, so a crash or a corrupt file always leaves the previous
// good record to fall back on. The store owns nothing in memory; callers own the records.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "os/env.h"
#include "protocol/job_spec.h"
#include "supervisor/job_record.h"

namespace baton::supervisor {

// A record read back, with the reasons any newer slot was rejected (to show the user).
struct loaded_record {
  job_record record;
  std::vector<std::string> rejected;
};

class job_store {
 public:
  job_store(os::env& e, std::filesystem::path state_dir);

  const std::filesystem::path& state_dir() const { return state_dir_; }
  std::filesystem::path job_dir(const std::string& id) const;
  std::filesystem::path spec_path(const std::string& id) const;
  std::filesystem::path checkpoint_dir(const std::string& id) const;
  std::filesystem::path log_path(const std::string& id) const;

  // Creates the state directory layout if missing.
  status open();

  // Creates a new job folder with the spec and a queued record. With `id` set (baton run uses
  // the job name), that id is used and must not exist yet; otherwise a fresh "<name>-<n>" id is
  // chosen: the only allocator, run by the state directory's one owner (os/state_lock.h). The
  // record is written last and is what makes the job exist: when this returns, spec and record
  // are fsynced and the job's folder and jobs/ are synced, so an acknowledged submit survives a
  // crash. A crash before that leaves a folder without a record (see sweep_incomplete).
  // Returns the new record.
  // `owner` goes into the record. With `hand_over`, the job's folder and its checkpoints/ are
  // then given to the owner (see hand_over), after spec and record are written, so the daemon's
  // own files exist before the user can touch the folder.
  result<job_record> create(const protocol::job_spec& spec, std::int64_t total_steps,
                            std::optional<std::string> id = std::nullopt,
                            std::optional<job_owner> owner = std::nullopt, bool hand_over = false);

  // System mode (jobs_run_as = "submitter"): the job's folder and checkpoints/ become the
  // owner's (uid, primary gid), mode 0700, so its workers can write there and other users cannot
  // read it. The files the daemon writes in it stay the daemon's; the env must then be a
  // no-follow one (os::make_no_follow_env) for the folder's user cannot be trusted not to plant
  // links. Idempotent.
  status hand_over(const std::string& id, const job_owner& owner);

  // Only record slots owned by `uid` (the daemon's) count when loading: in a folder its user
  // owns, that user could write a record of their own naming another owner. Off by default.
  void require_record_owner(std::uint32_t uid) { record_owner_ = uid; }

  bool exists(const std::string& id) const;

  // Persists the record: the slot after the newest, atomically; the other slot stays intact.
  status save(job_record& r);

  // The newest record that verifies.
  result<loaded_record> load(const std::string& id) const;
  result<protocol::job_spec> load_spec(const std::string& id) const;

  // Job ids, sorted. Folders whose name is not a valid id are ignored.
  result<std::vector<std::string>> list() const;

  // Removes every job folder that has no record slot: a create() cut short by a crash, never
  // acknowledged to anyone. Called by the state directory's owner at start, before recovery, so
  // such a folder is neither shown as a failed job nor mixed into a later job with its id.
  // Returns the ids removed (the caller logs them).
  result<std::vector<std::string>> sweep_incomplete();

  // Removes the temp files of record and spec writes a crash cut short, in every job's folder
  // (its checkpoints/ is checkpoint_store's). Only by the state directory's owner at start,
  // before any write. Returns how many it removed.
  result<int> sweep_temp_files();

  // Removes a job's folder entirely (baton run --fresh).
  status remove(const std::string& id);

 private:
  std::filesystem::path slot_path(const std::string& id, int slot) const;
  result<std::string> read_slot(const std::filesystem::path& path) const;
  // Every folder under jobs/ named like a job id, with or without a spec or record.
  result<std::vector<std::string>> folder_ids() const;

  os::env& env_;
  std::filesystem::path state_dir_;
  std::optional<std::uint32_t> record_owner_;
};

// Job ids become folder names: 1-80 characters of [A-Za-z0-9._-], not starting with '.', so no
// id can name a path outside the state directory.
status validate_job_id(const std::string& id);

// Milliseconds since the Unix epoch (std::chrono's system clock; no OS call of our own).
std::int64_t unix_ms_now();

}  // namespace baton::supervisor
