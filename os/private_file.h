// Small files that hold secrets (the control API's endpoint file with its bearer token): written
// so that from the first byte only this account, the machine's administrators and, optionally,
// one named group can read them. POSIX: mode 0600 (0640 with the group). Windows: a protected
// DACL set at creation (no inherited ACEs) that admits SYSTEM, Administrators, this process's
// user and, read-only, the group. The caller owns the path; nothing here keeps the file open.
// Implementations: os/posix/private_file_posix.cpp, os/windows/private_file_windows.cpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace baton::os {

// Writes `contents` to a new file beside `path` with the access above, flushes it and renames it
// over `path`, so a reader sees the old file or the whole new one. The folder must exist.
// Fails naming the group when it does not exist.
status write_private_file(const std::filesystem::path& path, std::string_view contents,
                          const std::optional<std::string>& group);

// Who may access `path`, for tests and diagnostics. POSIX: "mode 0600" (permission bits, octal).
// Windows: the DACL in SDDL, e.g. "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;FA;;;S-1-5-21-...)".
result<std::string> describe_file_access(const std::filesystem::path& path);

}  // namespace baton::os
