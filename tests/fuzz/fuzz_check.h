// Shared by the libFuzzer harnesses in tests/fuzz/. A harness checks invariants, not only crashes:
// a broken invariant prints what broke and aborts, which libFuzzer records as a crash and the
// gcc replay runner (replay_main.cpp) turns into a failed ctest. The harnesses own nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace baton::fuzz {

[[noreturn]] inline void invariant_failed(const char* file, int line, const char* what,
                                          const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n%s\n", file, line, what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return size == 0 ? std::string_view{}
                   : std::string_view(reinterpret_cast<const char*>(data), size);
}

// Error texts end up in JSON (API answers, logs): they must be valid UTF-8 and never empty.
inline bool is_valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace baton::fuzz

#define BATON_FUZZ_CHECK(cond, detail)                                                 \
  do {                                                                                 \
    if (!(cond)) ::baton::fuzz::invariant_failed(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
