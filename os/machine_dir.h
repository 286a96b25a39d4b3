// The machine-wide folder for baton's shared files, as opposed to os::default_state_dir()'s
// per-user one: where a Windows service's control endpoint file is found by every admin's
// `baton` without configuration (the role /run/baton plays on Linux).
// Implementations: os/posix/machine_dir_posix.cpp, os/windows/machine_dir_windows.cpp.
#pragma once

#include <filesystem>

namespace baton::os {

// Windows: %ProgramData%\baton (C:\ProgramData\baton when the variable is unset).
// POSIX: /var/lib/baton.
std::filesystem::path machine_dir();

}  // namespace baton::os
