// BCryptGenRandom with the system-preferred generator: no algorithm handle to open or leak.
#include <windows.h>
// windows.h first: bcrypt.h needs its types.
#include <bcrypt.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "os/random_bytes.h"

namespace baton::os {

status fill_random(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ULONG chunk = static_cast<ULONG>(
        std::min<std::size_t>(out.size() - done, std::numeric_limits<ULONG>::max()));
    const NTSTATUS rc =
        ::BCryptGenRandom(nullptr, out.data() + done, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG);
    if (rc < 0) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08lX", static_cast<unsigned long>(rc));
      return make_error(std::string("cannot read random bytes (BCryptGenRandom): NTSTATUS ") + hex);
    }
    done += chunk;
  }
  return {};
}

}  // namespace baton::os
