// Reading a job's log (the worker's stderr and non-protocol stdout, the supervisor's events) in
// bounded chunks for `GET /v1/jobs/<id>/logs` and `baton logs --follow`, across its rotation.
// The log is one logical stream of bytes kept in generations (job_log_writer.h writes them):
// <file> is the newest, <file>.1 the one before, ... <file>.N the oldest kept; <file>.start holds
// the offset in the stream of <file>'s first byte (decimal; absent: 0). Generations are whole
// lines and never change once rotated, so every byte keeps its stream offset for as long as it is
// kept. Each line starts with the time it was written (log_stamp). The caller owns the env and
// names the file; a chunk is a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "base/status.h"
#include "os/env.h"

namespace baton::supervisor {

// Generation k of the log (0: `file` itself, the one being written).
std::filesystem::path log_generation(const std::filesystem::path& file, int k);
// The file holding the stream offset of `file`'s first byte.
std::filesystem::path log_start_file(const std::filesystem::path& file);

// Bytes [offset, offset + max_bytes) of the log stream, cut back to a whole UTF-8 character so
// the JSON answer carries the text unchanged, and never past the end of one generation (the next
// call reads on from the next one). A missing log reads as empty. An offset older than the
// oldest kept byte reads from that byte, and `skipped` says how many bytes were lost to rotation.
struct log_chunk {
  std::uint64_t offset = 0;  // where the data starts (the asked offset plus skipped)
  std::uint64_t next_offset = 0;
  std::uint64_t size = 0;   // the stream's end when read
  std::uint64_t start = 0;  // the stream offset of the oldest byte still kept
  std::uint64_t skipped = 0;
  std::string data;
};
inline constexpr std::size_t max_log_chunk_bytes = 64 * 1024;
result<log_chunk> read_log_chunk(os::env& e, const std::filesystem::path& file,
                                 std::uint64_t offset, std::size_t max_bytes = max_log_chunk_bytes);

// The stamp at the start of every stored line: UTC to the millisecond and one space,
// "2026-12-01T19:32:37.123Z " (log_stamp_bytes long).
inline constexpr std::size_t log_stamp_bytes = 25;
std::string log_stamp(std::int64_t unix_ms);
// Whether `line` starts with a stamp of that shape.
bool starts_with_log_stamp(std::string_view line);

// Removes the stamps from log text that arrives in pieces cut anywhere (`baton logs` without
// --timestamps): only at the start of a line, and only a prefix of exactly the stamp's shape,
// so lines written before stamps existed pass unchanged. Holds at most one stamp's bytes back.
class log_stamp_stripper {
 public:
  // The text of `piece` without stamps; what may still be a stamp is held for the next piece.
  std::string feed(std::string_view piece);
  // What is still held (an unfinished line start that never became a stamp).
  std::string finish();

 private:
  bool at_line_start_ = true;
  std::string held_;
};

}  // namespace baton::supervisor
