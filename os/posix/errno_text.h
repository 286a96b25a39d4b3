// The C library's words for an errno value, for the POSIX layer's error messages. One copy, so
// that every file of the layer says the same thing (and a unity build sees one definition).
#pragma once

#include <cstring>
#include <string>

namespace baton::os {

inline std::string errno_text(int e) { return std::strerror(e); }

}  // namespace baton::os
