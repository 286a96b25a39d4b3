// The baton version, shared by both executables and written into hello messages and packages.
#pragma once

#include <string_view>

namespace baton::protocol {
std::string_view version();  // the project's version (CMakeLists.txt's project())
// The git commit the binaries were built from, 12 hex digits, "-dirty" when the tree had
// uncommitted changes; "unknown" outside a git checkout. Written at build time.
std::string_view build_commit();
}  // namespace baton::protocol
