#include "os/machine_dir.h"

namespace baton::os {

// FHS: variable state of a program shared by the whole machine.
std::filesystem::path machine_dir() { return "/var/lib/baton"; }

}  // namespace baton::os
