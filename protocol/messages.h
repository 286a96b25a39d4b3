// The worker protocol: JSON lines on the worker's stdout (worker -> supervisor) and stdin
// (supervisor -> worker). A worker's first line is `hello` with the protocol version. Encoding
// and decoding are pure functions on single lines; a malformed line is an error value naming
// what is wrong, never a crash. The wire format is documented in protocol/README.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "base/status.h"

namespace baton::protocol {

inline constexpr int protocol_version = 1;
inline constexpr std::size_t max_message_bytes = 1 << 20;

struct hello_msg {
  int protocol = protocol_version;
  std::int64_t pid = 0;
  std::string worker;  // free-form name and version of the trainer
};

struct progress_msg {
  std::int64_t step = 0;  // global optimizer steps done
  std::int64_t total_steps = 0;
  std::int64_t epoch = 0;  // 0-based epoch the step belongs to
  double loss = 0.0;
  std::map<std::string, double> metrics;  // accuracy, val_loss, val_accuracy, ...
  double samples_per_sec = 0.0;
  // Optional: the step this worker's shard ends at. With it, the supervisor can start the next
  // worker ahead (protocol/README.md, "Starting ahead") when a progress reports that step.
  std::optional<std::int64_t> shard_end_step;
};

// With a digest: a baton checkpoint file the worker wrote into BATON_CHECKPOINT_DIR. Without
// one (field absent or null): a folder the worker wrote into BATON_STAGING_DIR, for the
// supervisor to seal (protocol/README.md, "Folder checkpoints").
struct checkpoint_msg {
  std::string path;
  std::int64_t step = 0;
  std::optional<std::string> digest;
};

struct done_msg {
  std::int64_t step = 0;
  bool job_complete = false;  // true when the job's last step is done
};

struct error_msg {
  std::string message;
};

struct stop_msg {};
// To a worker started ahead (BATON_START_AHEAD=1), waiting set up: resume from the newest
// checkpoint in BATON_CHECKPOINT_DIR and train its shard.
struct resume_msg {};

using worker_message = std::variant<hello_msg, progress_msg, checkpoint_msg, done_msg, error_msg>;
using supervisor_message = std::variant<stop_msg, resume_msg>;

// One line, no trailing newline.
std::string encode(const worker_message& m);
std::string encode(const supervisor_message& m);

// A line that is JSON with a known "type" but breaks that message's schema fails with
// errc::protocol_violation; every other failure (not JSON, no or unknown "type") has no code.
result<worker_message> decode_worker_message(std::string_view line);
result<supervisor_message> decode_supervisor_message(std::string_view line);

// Decoding accepts any protocol number in hello so the supervisor can say which versions met;
// this is that check.
status check_protocol(const hello_msg& h);

// Whether a line decoded as JSON whose "type" is a worker message type (hello, progress,
// checkpoint, done, error): such a line is meant as a message, so a decode error for it is a
// protocol violation rather than text for the log. Anything else (not JSON, no "type", a type no
// version has) is text a trainer printed.
bool is_worker_message_type(std::string_view type);

// Whether an error text says the disk or the quota is full: ENOSPC or EDQUOT by name or in the
// words strerror (glibc, Python's OSError) or Windows (ERROR_DISK_FULL, ERROR_HANDLE_DISK_FULL)
// use. A worker's `error` that says so pauses its job instead of failing it (job_machine.h).
bool names_no_space(std::string_view text);

}  // namespace baton::protocol
