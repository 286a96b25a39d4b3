// Fuzzes protocol::parse_job_spec, the parser behind `baton validate` and POST /v1/jobs.
// Invariants: it never throws or crashes; a rejection has a non-empty, valid UTF-8 message; an
// accepted spec survives to_json -> dump -> parse unchanged, and to_json is a fixed point then.
#include <string>

#include "protocol/job_spec.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace baton::protocol;
  const std::filesystem::path base = "/fuzz/jobs";
  const auto text = baton::fuzz::as_text(data, size);

  auto spec = parse_job_spec(text, base);
  if (!spec) {
    const std::string message = spec.error().message;
    BATON_FUZZ_CHECK(!message.empty(), "empty error message");
    BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(message), message);
    return 0;
  }

  // strict: a spec the parser accepted must serialise without replacing anything.
  const std::string dumped =
      to_json(*spec).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  auto again = parse_job_spec(dumped, base);
  BATON_FUZZ_CHECK(again.has_value(),
                   "to_json output rejected: " + again.error().message + "\ndocument: " + dumped);
  BATON_FUZZ_CHECK(*again == *spec, "round trip changed the spec\ndocument: " + dumped);
  const std::string dumped_again = to_json(*again).dump();
  BATON_FUZZ_CHECK(dumped_again == dumped,
                   "to_json is not stable:\n" + dumped + "\n" + dumped_again);
  return 0;
}
