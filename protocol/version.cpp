#include "protocol/version.h"

namespace baton {
std::string_view version() { return "0.1.0"; }
}  // namespace baton
