// Whether this Windows build runs under wine rather than Windows. Only tests ask: wine 8 maps a
// file's security descriptor onto Unix mode bits instead of storing it, so a DACL read back there
// is wine's reconstruction, not what baton wrote. Never used to change behaviour.
// Implementations: os/posix/wine_posix.cpp, os/windows/wine_windows.cpp.
#pragma once

namespace baton::os {

bool running_under_wine();

}  // namespace baton::os
