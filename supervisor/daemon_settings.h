// Daemon settings are the knobs of `baton serve` that are not per job: where state and the control
// socket live, who may use the socket, how many jobs run at once, the memory limits a job gets
// when it names none, and how much the daemon logs. They come from an optional JSON file,
// validated like job files (every error by JSON path, unknown keys with a suggestion), then
// command-line flags override single fields. A plain value; the serve command owns it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace baton::os {
class env;
}

namespace baton::supervisor {

enum class log_level { error, warning, info, debug };

// Whose identity a job's workers get: the daemon's own (the per-user mode, and a system daemon
// that runs as a service user), or, for a daemon running as root (system mode), the user who
// submitted the job, with its groups, as Slurm and HTCondor do.
enum class jobs_run_as { daemon, submitter };

std::string_view to_string(jobs_run_as r);

std::string_view to_string(log_level l);
result<log_level> parse_log_level(std::string_view s);

inline constexpr int max_max_workers = 1024;
inline constexpr int max_control_port = 65535;
inline constexpr int max_max_connections = 65536;
inline constexpr std::int64_t max_header_timeout_ms = 600000;
inline constexpr std::int64_t max_log_max_mib = std::int64_t{1} << 20;  // a TiB per generation
inline constexpr int max_log_keep = 1000;

struct daemon_settings {
  std::filesystem::path state_dir;  // empty: os::default_state_dir()
  // The control socket, or on Windows the control endpoint file (control_endpoint.h).
  std::filesystem::path socket;  // empty: default_socket_path(uid, $XDG_RUNTIME_DIR)
  std::optional<std::string> socket_group;
  // Windows only (loopback TCP): the port on 127.0.0.1; unset or 0 lets the OS pick one, which
  // clients learn from the endpoint file. Set on Linux, the daemon refuses to start.
  std::optional<int> control_port;
  // The read-only loopback listener for GET /metrics (http_listener.h): "127.0.0.1:PORT".
  // Unset: off. Anything but a loopback address is refused when the settings are read.
  std::optional<std::string> http_listen;
  int max_workers = 1;  // jobs running at once; training already uses every core by default
  // Given to a job whose `memory` names neither limit. A job that sets one keeps its own.
  std::optional<std::int64_t> default_soft_limit_mib;
  std::optional<std::int64_t> default_hard_limit_mib;
  log_level level = log_level::info;
  // The largest checkpoint (a file, or a folder's files together) the daemon reads to verify it;
  // larger ones are rejected before any byte is read. A worker decides what it announces, so
  // without a cap a sparse file of any size would keep a verification busy. The default, 1 GiB,
  // is far above the built-in trainer's checkpoints; a job with a bigger model needs it raised.
  std::int64_t max_checkpoint_mib = 1024;
  // The control socket's limits (DAEMON.md, "Connections"): how long a connection may take to
  // send a request header, and how many connections may be open, all together and per uid.
  std::int64_t header_timeout_ms = 5000;
  int max_connections = 256;
  int max_connections_per_uid = 32;
  // Each job's log (worker stderr, its non-protocol stdout, the supervisor's events) rotates once
  // it would pass log_max_mib, keeping log_keep older generations (worker.log.1 ... .N): a worker
  // that floods stderr costs at most (log_keep + 1) * log_max_mib of disk (job_log_writer.h).
  std::int64_t log_max_mib = 64;
  int log_keep = 3;
  // "submitter" needs a daemon running as root (refused at start otherwise).
  jobs_run_as run_as = jobs_run_as::daemon;
  // With run_as submitter: whether a job submitted by root (uid 0) is accepted, and so runs as
  // root. Off: refused with 403, so no job runs as root by accident.
  bool allow_root_jobs = false;

  bool operator==(const daemon_settings&) const = default;
};

// Parses a settings document. Relative paths resolve against `base_dir` (the settings file's
// folder). On failure the message holds every problem, one per line, each naming the JSON path.
result<daemon_settings> parse_daemon_settings(std::string_view text,
                                              const std::filesystem::path& base_dir);

// Reads and parses a settings file; every error line is prefixed with the file name.
result<daemon_settings> load_daemon_settings(os::env& e, const std::filesystem::path& file);

// Every field, defaults included (absent optionals as null): `baton serve` logs it at start.
nlohmann::json to_json(const daemon_settings& s);

}  // namespace baton::supervisor
