#include "supervisor/job_log.h"

#include <algorithm>

namespace baton::supervisor {

namespace fs = std::filesystem;

result<log_chunk> read_log_chunk(os::env& e, const fs::path& file, std::uint64_t offset,
                                 std::size_t max_bytes) {
  log_chunk c;
  c.offset = c.next_offset = offset;
  if (!e.file_exists(file)) return c;  // no worker has written yet
  auto f = e.new_readable_file(file);
  if (!f) return make_error("cannot read " + file.string() + ": " + f.error().message);
  const auto size = (*f)->size();
  c.size = size;
  if (offset >= size) return c;
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, size - offset));
  if (auto s = (*f)->read(offset, want, c.data); !s) {
    return make_error("cannot read " + file.string() + ": " + s.error().message);
  }
  // Do not split a UTF-8 character across two chunks: the tail goes out with the next one.
  std::size_t cut = c.data.size();
  for (std::size_t back = 1; back <= 3 && back <= c.data.size(); ++back) {
    const auto b = static_cast<unsigned char>(c.data[c.data.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const std::size_t need = (b & 0xE0) == 0xC0   ? 2
                             : (b & 0xF0) == 0xE0 ? 3
                             : (b & 0xF8) == 0xF0 ? 4
                                                  : 1;
    if (need > back) cut = c.data.size() - back;
    break;
  }
  if (cut > 0) c.data.resize(cut);  // a lone broken tail is sent as is rather than never
  c.next_offset = offset + c.data.size();
  return c;
}

}  // namespace baton::supervisor
