// Expected failures in baton are values, not exceptions: a function that can fail returns
// `baton::result<T>` (a boost::system::result carrying a human-readable `baton::error`).
// Exceptions are reserved for boundaries (config load, the top of main). The error text is
// written for the user: it names the file, the JSON path or the byte offset that is wrong.
// Lives in base/, the bottom layer (header-only, target baton_base), because both os/ and
// protocol/ return these types and protocol/ links os/: neither may own it.
#pragma once

#include <boost/system/result.hpp>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace baton {

// What kind of failure an error is, where a caller must branch on it: callers test the code,
// never the wording of the message. Most errors need none and stay `unspecified`.
enum class errc {
  unspecified,
  // The new data is durable; only the clean-up after it (pruning, stale temp files) failed.
  saved_but_cleanup_failed,
  // The disk or the quota is full (ENOSPC, EDQUOT, ERROR_DISK_FULL): a save that may work once
  // the user has made room, so the job pauses rather than fails.
  no_space,
  // A worker line meant as a protocol message (JSON with a known "type") that breaks the
  // message's schema, such as "step":"40": a protocol violation, not text for the log.
  protocol_violation,
  // Bytes read back do not hash to the digest they carry (a damaged or modified file): the
  // caller may fall back to an older copy.
  corrupt_data,
};

// Not constructible from a bare string on purpose: result<std::string> must stay unambiguous.
// Build one with make_error().
struct error {
  struct from_message_t {};
  error() = default;
  error(from_message_t, std::string m, errc c = errc::unspecified)
      : message(std::move(m)), code(c) {}
  std::string message;
  errc code = errc::unspecified;
};

inline std::ostream& operator<<(std::ostream& os, const error& e) { return os << e.message; }

// Thrown only where a caller explicitly asks for `.value()` on a failed result.
class error_exception : public std::runtime_error {
 public:
  explicit error_exception(const error& e) : std::runtime_error(e.message) {}
};

// Found by ADL from boost::system::result<T, error>::value().
[[noreturn]] inline void throw_exception_from_error(const error& e, const boost::source_location&) {
  throw error_exception(e);
}

template <class T>
using result = boost::system::result<T, error>;
using status = result<void>;

inline error make_error(std::string message, errc code = errc::unspecified) {
  return error(error::from_message_t{}, std::move(message), code);
}

// Prefixes the message of a failed result with context ("checkpoint x: " + message); the code
// is kept unless a new one is given.
inline error with_context(const std::string& context, const error& e) {
  return make_error(context + ": " + e.message, e.code);
}
inline error with_context(const std::string& context, const error& e, errc code) {
  return make_error(context + ": " + e.message, code);
}

// Prefixes every line of a multi-line error (one problem per line) with `prefix`, compiler
// style ("job.json: training.epochs: ..."), so each line stands alone in a log.
inline error prefix_lines(const std::string& prefix, const error& e) {
  std::string out;
  std::size_t start = 0;
  const std::string& m = e.message;
  while (start < m.size()) {
    const auto nl = m.find('\n', start);
    if (!out.empty()) out += '\n';
    out += prefix;
    out.append(m, start, nl == std::string::npos ? std::string::npos : nl - start);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return make_error(std::move(out), e.code);
}

}  // namespace baton
