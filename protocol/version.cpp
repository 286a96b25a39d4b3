#include "protocol/version.h"

namespace baton::protocol {
std::string_view version() { return "0.1.0"; }
}  // namespace baton::protocol
