// Writes a job's log: the worker's stderr (handed over in chunks by os::spawn's on_stderr), the
// text a worker prints on stdout between protocol lines, and the supervisor's "[baton] ..."
// events. Each line is stored with the time it was written in front (log_stamp, job_log.h), a
// line longer than max_line_bytes is cut with a marker, and the file rotates before it would pass
// max_bytes, keeping `keep` older generations (layout and offsets in job_log.h), so a worker that
// floods stderr costs at most (keep + 1) * max_bytes of disk and one line of memory.
// A plain object over os::env, no I/O of its own; the owner (a job runner, or a caller with one
// line to add) calls it on one thread. Several writers of one file may take turns (each looks at
// the file before it writes), but not at the same time. Writing is best effort for the caller: a
// log that cannot be written must not stop a job, so errors are returned and may be ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "os/env.h"

namespace baton::supervisor {

struct log_limits {
  std::uint64_t max_bytes = std::uint64_t{64} << 20;  // daemon setting log_max_mib
  int keep = 3;                                       // daemon setting log_keep
  std::size_t max_line_bytes = 64 * 1024;             // of a line's text, without the stamp
};

// " [baton: line cut at N bytes]": what a cut line ends with.
std::string cut_marker(std::size_t max_line_bytes);

class job_log_writer {
 public:
  // `now_ms` gives the wall clock in Unix milliseconds for the stamps; empty: the system clock.
  job_log_writer(os::env& e, std::filesystem::path file, log_limits limits = {},
                 std::function<std::int64_t()> now_ms = {});

  // Adds one whole line (no newline), stamped.
  status add_line(std::string_view line);
  // Adds bytes of a stream (stderr) cut anywhere: whole lines are stored at once, an unfinished
  // one is held (at most max_line_bytes) until its newline or end_stream().
  status add_stream(std::string_view bytes);
  // The stream ended: a held unfinished line is stored as a line.
  status end_stream();

  const std::filesystem::path& file() const { return file_; }

 private:
  void emit(std::string_view line, bool cut, std::int64_t now);
  status flush();
  status rotate(std::uint64_t current_size);

  os::env& e_;
  std::filesystem::path file_;
  log_limits limits_;
  std::function<std::int64_t()> now_ms_;
  std::string partial_;    // the stream's unfinished line
  bool skipping_ = false;  // the rest of a stream line that was already cut
  std::string batch_;      // stamped lines not yet appended
};

}  // namespace baton::supervisor
