// baton-worker's process shell around the trainer: command line, protocol messages on stdout,
// stop requests (stdin `stop`, SIGTERM, SIGINT), checkpoint files, fault injection and exit
// codes. One process trains one shard of one job and exits; the supervisor owns restarting it.
// The functions are a library so tests can drive the pieces; main.cpp only calls run_worker.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"

namespace baton::worker {

// The contract with the supervisor (protocol/README.md).
enum exit_code : int {
  exit_done = 0,           // shard or job done, checkpoint written
  exit_runtime_error = 1,  // after an `error` message
  exit_bad_config = 2,     // bad command line, job, data or checkpoint spec; after `error`
  exit_stopped = 3,        // stopped on request, checkpoint written
};

inline constexpr const char* job_file_env = "BATON_JOB_FILE";
inline constexpr const char* checkpoint_dir_env = "BATON_CHECKPOINT_DIR";
inline constexpr const char* max_steps_env = "BATON_MAX_STEPS";
// "1": started ahead of its turn (protocol/README.md, "Starting ahead"): set up, then wait for
// the supervisor's `resume` line before reading the checkpoint.
inline constexpr const char* start_ahead_env = "BATON_START_AHEAD";

struct worker_options {
  std::filesystem::path job_file;
  std::filesystem::path checkpoint_dir;
  std::optional<int> threads;  // overrides training.threads
  // At most this many steps in this process (the supervisor's learned memory budget); the
  // shard then ends early, with a checkpoint, as if its boundary were there.
  std::optional<std::int64_t> max_steps;
  // Started ahead (BATON_START_AHEAD=1): everything but the restore is done while the previous
  // worker still saves, and the restore waits for `resume` on stdin.
  bool start_ahead = false;
};

struct command_line {
  std::optional<worker_options> options;  // empty when only help (or the man page) was asked for
  std::string help;                       // usage text for --help, the man page for --generate-man
};

// Looks up an environment variable; tests pass a map instead of the real environment.
using env_lookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> process_env(const char* name);

// Parses `baton-worker --job FILE --checkpoint-dir DIR [--threads N]`; a missing flag falls back
// to BATON_JOB_FILE / BATON_CHECKPOINT_DIR. Errors name the flag or variable.
result<command_line> parse_command_line(int argc, const char* const* argv,
                                        const env_lookup& lookup = process_env);

// The whole worker: returns the process exit code. Never throws.
int run_worker(int argc, char** argv);

}  // namespace baton::worker
