#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "os/random_bytes.h"

namespace baton::os {

status fill_random(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    // Blocks only until the kernel's pool is first initialised (early boot), never after.
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(std::string("cannot read random bytes (getrandom): ") +
                        std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace baton::os
