#include "supervisor/job_log_writer.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "supervisor/job_log.h"

namespace baton::supervisor {

namespace fs = std::filesystem;

namespace {

// Stamped lines are appended in pieces of about this much, each one whole lines: the file then
// never passes max_bytes by more than nothing (a rotation comes first), and a chunk of 64 KiB of
// empty lines (1.6 MiB once stamped) is not one piece.
constexpr std::size_t batch_bytes = 64 * 1024;

std::int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The longest prefix of `s` of at most `n` bytes that does not end inside a UTF-8 character.
std::string_view utf8_prefix(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut > 0 ? cut : n);
}

}  // namespace

std::string cut_marker(std::size_t max_line_bytes) {
  return " [baton: line cut at " + std::to_string(max_line_bytes) + " bytes]";
}

job_log_writer::job_log_writer(os::env& e, fs::path file, log_limits limits,
                               std::function<std::int64_t()> now_ms)
    : e_(e), file_(std::move(file)), limits_(limits), now_ms_(std::move(now_ms)) {
  if (!now_ms_) now_ms_ = system_ms;
  if (limits_.keep < 0) limits_.keep = 0;
  if (limits_.max_line_bytes == 0) limits_.max_line_bytes = 1;
}

void job_log_writer::emit(std::string_view line, bool cut, std::int64_t now) {
  batch_ += log_stamp(now);
  if (cut || line.size() > limits_.max_line_bytes) {
    batch_ += utf8_prefix(line, limits_.max_line_bytes);
    batch_ += cut_marker(limits_.max_line_bytes);
  } else {
    batch_ += line;
  }
  batch_ += '\n';
}

status job_log_writer::add_line(std::string_view line) {
  emit(line, false, now_ms_());
  return flush();
}

status job_log_writer::add_stream(std::string_view bytes) {
  const auto now = now_ms_();
  status worst;
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    const auto piece = bytes.substr(0, nl);
    if (skipping_) {
      if (nl != std::string_view::npos) skipping_ = false;
    } else if (partial_.size() + piece.size() > limits_.max_line_bytes) {
      // Too long to hold: stored now, cut; the rest of it, up to its newline, is dropped.
      const auto room = limits_.max_line_bytes - partial_.size();
      partial_.append(utf8_prefix(piece, room));
      emit(partial_, true, now);
      partial_.clear();
      skipping_ = nl == std::string_view::npos;
    } else if (nl == std::string_view::npos) {
      partial_.append(piece);
    } else if (partial_.empty()) {
      emit(piece, false, now);
    } else {
      partial_.append(piece);
      emit(partial_, false, now);
      partial_.clear();
    }
    if (batch_.size() >= batch_bytes) {
      if (auto s = flush(); !s) worst = s;
    }
    if (nl == std::string_view::npos) break;
    bytes.remove_prefix(nl + 1);
  }
  if (auto s = flush(); !s) worst = s;
  return worst;
}

status job_log_writer::end_stream() {
  skipping_ = false;
  if (partial_.empty()) return {};
  emit(partial_, false, now_ms_());
  partial_.clear();
  return flush();
}

status job_log_writer::flush() {
  if (batch_.empty()) return {};
  std::string batch = std::exchange(batch_, {});
  std::uint64_t size = 0;
  auto info = e_.stat_no_follow(file_);
  if (info) {
    if (info->kind == os::entry_kind::regular) {
      size = info->size;
    } else if (info->kind != os::entry_kind::missing) {
      // A link or anything else a worker put in the log's place: appending would write
      // through it, with the daemon's rights. Removed (the link itself), a fresh log follows.
      (void)e_.remove_file(file_);
    }
  }
  if (size > 0 && size + batch.size() > limits_.max_bytes) {
    if (auto s = rotate(size); !s) return s;
  }
  auto f = e_.new_appendable_file(file_);
  if (!f) return f.error();
  auto s = (*f)->append(batch);
  auto c = (*f)->close();
  return s ? c : s;
}

status job_log_writer::rotate(std::uint64_t current_size) {
  std::uint64_t start = 0;
  {
    const auto p = log_start_file(file_);
    if (e_.file_exists(p)) {
      if (auto text = e_.read_file(p)) {
        // A damaged start reads as 0: the stream begins again (readers may repeat lines).
        if (std::from_chars(text->data(), text->data() + text->size(), start).ec != std::errc()) {
          start = 0;
        }
      }
    }
  }
  // The oldest kept generation goes, and any older ones a larger `keep` left behind.
  for (int k = std::max(limits_.keep, 1);; ++k) {
    const auto p = log_generation(file_, k);
    if (!e_.file_exists(p)) break;
    if (auto s = e_.remove_file(p); !s) return s;
  }
  for (int k = limits_.keep - 1; k >= 1; --k) {
    const auto p = log_generation(file_, k);
    if (!e_.file_exists(p)) continue;
    if (auto s = e_.rename_file(p, log_generation(file_, k + 1)); !s) return s;
  }
  if (limits_.keep > 0) {
    if (auto s = e_.rename_file(file_, log_generation(file_, 1)); !s) return s;
  } else if (auto s = e_.remove_file(file_); !s) {
    return s;
  }
  // After the renames: a crash between them leaves a start that is too small, and a reader
  // then sees some lines twice rather than never.
  return os::write_file_atomic(e_, log_start_file(file_), std::to_string(start + current_size));
}

}  // namespace baton::supervisor
