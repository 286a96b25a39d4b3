#include "supervisor/job_access.h"

namespace baton::supervisor {

std::uint32_t job_owner_uid(const job_record& r, std::uint32_t daemon_uid) {
  return r.owner ? r.owner->uid : daemon_uid;
}

bool may_access(const api_caller& caller, std::uint32_t owner_uid) {
  return caller.privileged || caller.uid == owner_uid;
}

std::optional<api_error> check_job_access(const api_caller& caller, const std::string& id,
                                          std::uint32_t owner_uid) {
  if (may_access(caller, owner_uid)) return std::nullopt;
  return api_error{403, "job " + id + " belongs to uid " + std::to_string(owner_uid) +
                            "; you are uid " + std::to_string(caller.uid)};
}

std::optional<api_error> check_submitter(const daemon_settings& settings,
                                         std::uint32_t submitter_uid) {
  if (settings.run_as != jobs_run_as::submitter || submitter_uid != 0 || settings.allow_root_jobs) {
    return std::nullopt;
  }
  return api_error{403,
                   "jobs run as the user who submits them (jobs_run_as = \"submitter\"), and this "
                   "job was submitted by root (uid 0): refused, since allow_root_jobs is false. "
                   "Submit it as the user it should run as, or set allow_root_jobs = true in the "
                   "daemon's settings"};
}

status check_run_as_setting(const daemon_settings& settings, std::uint32_t daemon_uid,
                            bool credentials_supported) {
  if (settings.run_as != jobs_run_as::submitter) {
    // A root daemon whose socket a group may use would run its members' jobs as root: what a
    // conffile that lost its jobs_run_as line (an old one kept at upgrade) would silently do.
    if (credentials_supported && daemon_uid == 0 && settings.socket_group &&
        !settings.allow_root_jobs) {
      return make_error(
          "jobs_run_as = \"daemon\" with the daemon running as root would run the "
          "jobs of socket_group \"" +
          *settings.socket_group +
          "\"'s members as root: set jobs_run_as = \"submitter\" (each job runs as "
          "its submitter), or allow_root_jobs = true if that is meant");
    }
    return {};
  }
  if (!credentials_supported) {
    return make_error(
        "jobs_run_as = \"submitter\": workers cannot run as another user on this system; use "
        "\"daemon\"");
  }
  if (daemon_uid != 0) {
    return make_error(
        "jobs_run_as = \"submitter\" needs the daemon to run as root (it runs as uid " +
        std::to_string(daemon_uid) +
        ") to start each job as its submitter; run it as root (the system unit), "
        "or set jobs_run_as = \"daemon\" (workers run as the daemon's user)");
  }
  return {};
}

result<std::optional<os::process_credentials>> worker_credentials(const daemon_settings& settings,
                                                                  const job_record& r,
                                                                  std::uint32_t daemon_uid) {
  if (settings.run_as != jobs_run_as::submitter) return std::optional<os::process_credentials>{};
  os::process_credentials c;
  if (r.owner) {
    c.uid = r.owner->uid;
    c.gid = r.owner->gid;
    c.groups = r.owner->groups;
  } else {
    c.uid = daemon_uid;
    c.gid = daemon_uid;  // root's group: the only owner-less case that reaches here is root's
  }
  if (c.uid == 0 && !settings.allow_root_jobs) {
    return make_error("job " + r.id + " would run as root (uid 0" +
                      std::string(r.owner ? "" : ": its record names no owner") +
                      "), and allow_root_jobs is false");
  }
  return std::optional<os::process_credentials>(std::move(c));
}

env_entries worker_login_env(const job_record& r,
                             const std::optional<os::process_credentials>& run_as,
                             std::uint32_t daemon_uid,
                             const std::optional<os::user_account>& account,
                             const std::string& job_dir) {
  env_entries out;
  const auto path = r.owner ? r.owner->path : std::nullopt;
  if (!run_as) {
    if (path && job_owner_uid(r, daemon_uid) == daemon_uid) out.emplace_back("PATH", *path);
    return out;
  }
  const std::string name =
      account && !account->name.empty() ? account->name : std::to_string(run_as->uid);
  out.emplace_back("USER", name);
  out.emplace_back("LOGNAME", name);
  out.emplace_back("HOME", account && !account->home.empty() ? account->home : job_dir);
  out.emplace_back("SHELL", account && !account->shell.empty() ? account->shell : "/bin/sh");
  if (path) out.emplace_back("PATH", *path);
  return out;
}

}  // namespace baton::supervisor
