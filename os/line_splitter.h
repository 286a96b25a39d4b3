// Splits a child's stdout, read in arbitrary chunks, into protocol lines. Shared by the POSIX
// and Windows process code (pure: no OS calls). A '\r' ends a line as '\n' does: progress bars
// redraw themselves with '\r' and never print '\n', and a protocol line written after one must
// still start a line of its own. Empty lines are dropped, so "\r\n" (Windows text mode) is one
// line end. A line longer than the limit is handed out cut, once, with message_size, and the rest
// of it up to the next line end is skipped, so one runaway line never buffers without bound. The
// owner keeps one splitter per stream.
#pragma once

#include <boost/system/errc.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <string>
#include <string_view>

namespace baton::os {

class line_splitter {
 public:
  explicit line_splitter(std::size_t max_line) : max_line_(max_line) {}

  // Calls on_line(ec, line) for every complete non-empty line in `data` (ec empty) and for a
  // cut line (ec == message_size). Stops early when on_line returns false.
  template <class F>
  void feed(std::string_view data, F&& on_line) {
    while (!data.empty()) {
      const auto nl = data.find_first_of(line_ends);
      const auto piece = data.substr(0, nl);
      if (!skipping_) {
        const auto room = max_line_ - partial_.size();
        partial_.append(piece.substr(0, room));
        if (piece.size() > room) {
          const bool more =
              on_line(boost::system::errc::make_error_code(boost::system::errc::message_size),
                      std::string_view(partial_));
          partial_.clear();
          skipping_ = true;
          if (!more) return;
        }
      }
      if (nl == std::string_view::npos) return;
      bool more = true;
      if (!skipping_ && !partial_.empty()) {
        more = on_line(boost::system::error_code{}, std::string_view(partial_));
      }
      partial_.clear();
      skipping_ = false;
      data.remove_prefix(nl + 1);
      if (!more) return;
    }
  }

  // End of the stream: a last line without a newline is still a line.
  template <class F>
  void finish(F&& on_line) {
    if (!partial_.empty() && !skipping_)
      on_line(boost::system::error_code{}, std::string_view(partial_));
    partial_.clear();
    skipping_ = false;
  }

 private:
  static constexpr std::string_view line_ends{"\r\n", 2};

  std::size_t max_line_;
  std::string partial_;
  bool skipping_ = false;
};

}  // namespace baton::os
