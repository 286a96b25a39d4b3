// Who may do what to a job, and as whom its workers run: the daemon's access decisions as pure
// functions of the caller (control_api.h's api_caller, from the socket's peer credentials), the
// job's owner (job_record.h) and the settings (jobs_run_as, allow_root_jobs). The daemon asks
// these before every per-job call, every list and prune, every submit and every worker start;
// nothing here touches the OS, so each rule is unit tested on its own (tests/supervisor).
// Owners: a caller owns nothing; the daemon owns the records these read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "os/peer_credentials.h"
#include "os/process.h"
#include "supervisor/control_api.h"
#include "supervisor/daemon_settings.h"
#include "supervisor/job_record.h"

namespace baton::supervisor {

// The uid a job belongs to: its recorded owner, or for a record written before jobs had owners,
// the daemon's own uid (such jobs were all submitted through a socket only the daemon's user,
// root and the socket group could use, and stay visible to the privileged).
std::uint32_t job_owner_uid(const job_record& r, std::uint32_t daemon_uid);

// Whether `caller` may see and change a job owned by `owner_uid`: privileged callers (root, the
// daemon's uid) every job, anyone else their own.
bool may_access(const api_caller& caller, std::uint32_t owner_uid);

// Unset when allowed; else 403 "job J belongs to uid U; you are uid V".
std::optional<api_error> check_job_access(const api_caller& caller, const std::string& id,
                                          std::uint32_t owner_uid);

// Whether a submit may be accepted. With jobs_run_as = "submitter" a job runs as its submitter,
// so one submitted by root would run as root: refused (403, naming allow_root_jobs) unless the
// settings allow it.
std::optional<api_error> check_submitter(const daemon_settings& settings,
                                         std::uint32_t submitter_uid);

// Checked at the daemon's start: jobs_run_as = "submitter" needs root (setuid), and a host where
// workers can change user at all (`credentials_supported`: not Windows); jobs_run_as = "daemon"
// in a root daemon with a socket_group would run the group's jobs as root, so it also needs
// allow_root_jobs. An error naming the setting otherwise.
status check_run_as_setting(const daemon_settings& settings, std::uint32_t daemon_uid,
                            bool credentials_supported);

// The identity a job's workers get: unset (the daemon's own) with jobs_run_as = "daemon"; else
// the job's owner (the daemon's uid for an owner-less record), or an error when that is root and
// allow_root_jobs is off (a record from before, or one whose owner became root).
result<std::optional<os::process_credentials>> worker_credentials(const daemon_settings& settings,
                                                                  const job_record& r,
                                                                  std::uint32_t daemon_uid);

// The environment a job's worker starts from, under the job's own worker.env: that of a login of
// the user it runs as, so a trainer finds its ~/.cache, its config and its programs as in the
// submitter's shell. A worker run as its submitter (`run_as` set) gets USER, LOGNAME, HOME and
// SHELL from their `account` (with none, USER and LOGNAME are the uid, HOME the job's folder and
// SHELL /bin/sh: never the daemon's) and the PATH their client sent, if any. A worker run as the
// daemon's user gets the submitter's PATH only when that submitter is the daemon's user (the
// per-user daemon), else nothing: it keeps the daemon's.
using env_entries = std::vector<std::pair<std::string, std::string>>;
env_entries worker_login_env(const job_record& r,
                             const std::optional<os::process_credentials>& run_as,
                             std::uint32_t daemon_uid,
                             const std::optional<os::user_account>& account,
                             const std::string& job_dir);

}  // namespace baton::supervisor
