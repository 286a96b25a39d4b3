#include "protocol/version.h"

namespace baton::protocol {
std::string_view version() { return BATON_VERSION; }
}  // namespace baton::protocol
