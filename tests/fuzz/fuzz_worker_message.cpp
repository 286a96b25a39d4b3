// Fuzzes the worker protocol decoders on single lines, as read off a worker's stdout or stdin.
// Invariants: no throw or crash; a rejection has a non-empty, valid UTF-8 message; an accepted
// message re-encodes to one line without a newline that decodes to the same message, and
// encoding that is a fixed point (NaN travels as null, so values compare NaN-aware).
#include <cmath>
#include <map>
#include <string>
#include <variant>

#include "protocol/messages.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace baton::protocol;

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

bool same(const worker_message& a, const worker_message& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<hello_msg>(&a)) {
    const auto& y = std::get<hello_msg>(b);
    return x->protocol == y.protocol && x->pid == y.pid && x->worker == y.worker;
  }
  if (const auto* x = std::get_if<progress_msg>(&a)) {
    const auto& y = std::get<progress_msg>(b);
    if (x->metrics.size() != y.metrics.size()) return false;
    for (const auto& [k, v] : x->metrics) {
      const auto it = y.metrics.find(k);
      if (it == y.metrics.end() || !same(v, it->second)) return false;
    }
    return x->step == y.step && x->total_steps == y.total_steps && x->epoch == y.epoch &&
           same(x->loss, y.loss) && same(x->samples_per_sec, y.samples_per_sec);
  }
  if (const auto* x = std::get_if<checkpoint_msg>(&a)) {
    const auto& y = std::get<checkpoint_msg>(b);
    return x->path == y.path && x->step == y.step && x->digest == y.digest;
  }
  if (const auto* x = std::get_if<done_msg>(&a)) {
    const auto& y = std::get<done_msg>(b);
    return x->step == y.step && x->job_complete == y.job_complete;
  }
  return std::get<error_msg>(a).message == std::get<error_msg>(b).message;
}

template <class R>
void check_rejection(const R& r) {
  const std::string message = r.error().message;
  BATON_FUZZ_CHECK(!message.empty(), "empty error message");
  BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(message), message);
}

void check_line(const std::string& line) {
  BATON_FUZZ_CHECK(line.find('\n') == std::string::npos, "encoded message spans lines: " + line);
  BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(line), "encoded message is not UTF-8: " + line);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto line = baton::fuzz::as_text(data, size);

  if (auto m = decode_worker_message(line)) {
    const std::string encoded = encode(*m);
    check_line(encoded);
    auto again = decode_worker_message(encoded);
    BATON_FUZZ_CHECK(again.has_value(), "re-encoded message rejected: " + again.error().message +
                                            "\nline: " + encoded);
    BATON_FUZZ_CHECK(same(*m, *again), "round trip changed the message\nline: " + encoded);
    BATON_FUZZ_CHECK(encode(*again) == encoded, "encoding is not stable: " + encoded);
  } else {
    check_rejection(m);
  }

  if (auto s = decode_supervisor_message(line)) {
    const std::string encoded = encode(*s);
    check_line(encoded);
    auto again = decode_supervisor_message(encoded);
    BATON_FUZZ_CHECK(again.has_value(), "re-encoded stop rejected: " + encoded);
    BATON_FUZZ_CHECK(again->index() == s->index(), "round trip changed the message: " + encoded);
  } else {
    check_rejection(s);
  }
  return 0;
}
