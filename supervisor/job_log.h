// Reading a job's log (the worker's stderr and the supervisor's events, one file per job) in
// bounded chunks for `GET /v1/jobs/<id>/logs` and `baton logs --follow`. The caller owns the env
// and names the file; a chunk is a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "base/status.h"
#include "os/env.h"

namespace baton::supervisor {

// Bytes [offset, offset + max_bytes) of a log file, cut back to a whole UTF-8 character so the
// JSON answer carries the text unchanged. A missing file reads as empty.
struct log_chunk {
  std::uint64_t offset = 0;
  std::uint64_t next_offset = 0;
  std::uint64_t size = 0;  // file size when read
  std::string data;
};
inline constexpr std::size_t max_log_chunk_bytes = 64 * 1024;
result<log_chunk> read_log_chunk(os::env& e, const std::filesystem::path& file,
                                 std::uint64_t offset, std::size_t max_bytes = max_log_chunk_bytes);

}  // namespace baton::supervisor
