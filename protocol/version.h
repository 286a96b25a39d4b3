// The baton version, shared by both executables and written into hello messages and packages.
#pragma once

#include <string_view>

namespace baton::protocol {
std::string_view version();
}
