#include "supervisor/job_log.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>
#include <vector>

namespace baton::supervisor {

namespace fs = std::filesystem;

fs::path log_generation(const fs::path& file, int k) {
  if (k == 0) return file;
  fs::path p = file;
  p += ".";
  p += std::to_string(k);
  return p;
}

fs::path log_start_file(const fs::path& file) {
  fs::path p = file;
  p += ".start";
  return p;
}

namespace {

struct generation {
  std::unique_ptr<os::readable_file> file;
  std::uint64_t start = 0;  // stream offset of its first byte
  std::uint64_t size = 0;
};

// The log's files are in a folder the worker can write to: opened as untrusted (no link, no
// FIFO), so a worker cannot point the daemon's reads elsewhere or make them hang.
result<std::unique_ptr<os::readable_file>> open_part(os::env& e, const fs::path& p,
                                                     const fs::path& within) {
  return e.new_untrusted_readable_file(p, {std::numeric_limits<std::uint64_t>::max(), within});
}

std::uint64_t read_start(os::env& e, const fs::path& file) {
  const auto p = log_start_file(file);
  if (!e.file_exists(p)) return 0;
  auto text = e.read_file(p);
  if (!text) return 0;
  std::uint64_t v = 0;
  const auto* b = text->data();
  const auto r = std::from_chars(b, b + text->size(), v);
  return r.ec == std::errc() ? v : 0;
}

// Every kept generation, oldest first, with its place in the stream. All opened before any is
// read, so the sizes belong together (the daemon writes and reads on one thread).
result<std::vector<generation>> open_generations(os::env& e, const fs::path& file) {
  const fs::path within = file.parent_path();
  std::vector<generation> newest_first;
  if (e.file_exists(file)) {
    auto f = open_part(e, file, within);
    if (!f) return make_error("cannot read " + file.string() + ": " + f.error().message);
    generation g;
    g.size = (*f)->size();
    g.file = std::move(*f);
    newest_first.push_back(std::move(g));
  } else {
    newest_first.push_back(generation{});  // nothing written since the last rotation (or ever)
  }
  newest_first.front().start = read_start(e, file);
  for (int k = 1;; ++k) {
    const auto p = log_generation(file, k);
    if (!e.file_exists(p)) break;
    auto f = open_part(e, p, within);
    if (!f) break;  // not one of ours any more: the stream starts after it
    generation g;
    g.size = (*f)->size();
    const auto after = newest_first.back().start;
    if (g.size > after) break;  // sizes that do not fit the start: a damaged layout
    g.start = after - g.size;
    g.file = std::move(*f);
    newest_first.push_back(std::move(g));
  }
  std::reverse(newest_first.begin(), newest_first.end());
  return newest_first;
}

}  // namespace

result<log_chunk> read_log_chunk(os::env& e, const fs::path& file, std::uint64_t offset,
                                 std::size_t max_bytes) {
  log_chunk c;
  c.offset = c.next_offset = offset;
  auto gens = open_generations(e, file);
  if (!gens) return gens.error();
  const auto& newest = gens->back();
  c.start = gens->front().start;
  c.size = newest.start + newest.size;
  if (offset < c.start) {
    c.skipped = c.start - offset;
    c.offset = c.next_offset = offset = c.start;
  }
  if (offset >= c.size) return c;
  // The generation holding `offset`: the last that starts at or before it and is not empty.
  const generation* g = nullptr;
  for (const auto& x : *gens) {
    if (x.file && x.start <= offset && offset < x.start + x.size) g = &x;
  }
  if (!g) return c;
  const auto at = offset - g->start;
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, g->size - at));
  if (auto s = g->file->read(at, want, c.data); !s) {
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

namespace {

// Days since 1970-01-01 to a civil date (H. Hinnant's days_from_civil, inverted).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  y = static_cast<std::int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
}

void put_digits(std::string& out, std::int64_t v, int width) {
  std::string s = std::to_string(v);
  if (static_cast<int>(s.size()) < width) out.append(width - s.size(), '0');
  out += s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string log_stamp(std::int64_t unix_ms) {
  if (unix_ms < 0) unix_ms = 0;
  const std::int64_t ms_per_day = 86400000;
  const std::int64_t days = unix_ms / ms_per_day;
  std::int64_t rest = unix_ms % ms_per_day;
  std::int64_t y = 0;
  unsigned m = 0, d = 0;
  civil_from_days(days, y, m, d);
  std::string out;
  out.reserve(log_stamp_bytes);
  put_digits(out, y, 4);
  out += '-';
  put_digits(out, m, 2);
  out += '-';
  put_digits(out, d, 2);
  out += 'T';
  put_digits(out, rest / 3600000, 2);
  rest %= 3600000;
  out += ':';
  put_digits(out, rest / 60000, 2);
  rest %= 60000;
  out += ':';
  put_digits(out, rest / 1000, 2);
  out += '.';
  put_digits(out, rest % 1000, 3);
  out += "Z ";
  return out;
}

bool starts_with_log_stamp(std::string_view line) {
  // "dddd-dd-ddTdd:dd:dd.dddZ "
  constexpr std::string_view shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
  static_assert(shape.size() == log_stamp_bytes);
  if (line.size() < shape.size()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 'd' ? !is_digit(line[i]) : line[i] != shape[i]) return false;
  }
  return true;
}

std::string log_stamp_stripper::feed(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  std::size_t i = 0;
  while (i < piece.size()) {
    if (at_line_start_) {
      // Gather up to a stamp's length, then decide once.
      const std::size_t take = std::min(log_stamp_bytes - held_.size(), piece.size() - i);
      const auto nl = piece.substr(i, take).find('\n');
      if (nl != std::string_view::npos) {
        // The line ends before it could hold a stamp: pass it on as it is.
        out += held_;
        out.append(piece.substr(i, nl + 1));
        held_.clear();
        i += nl + 1;
        continue;
      }
      held_.append(piece.substr(i, take));
      i += take;
      if (held_.size() < log_stamp_bytes) break;  // wait for more
      if (!starts_with_log_stamp(held_)) out += held_;
      held_.clear();
      at_line_start_ = false;
      continue;
    }
    const auto nl = piece.find('\n', i);
    if (nl == std::string_view::npos) {
      out.append(piece.substr(i));
      break;
    }
    out.append(piece.substr(i, nl + 1 - i));
    i = nl + 1;
    at_line_start_ = true;
  }
  return out;
}

std::string log_stamp_stripper::finish() { return std::exchange(held_, {}); }

}  // namespace baton::supervisor
