#include "os/wine.h"

namespace baton::os {

// A POSIX build is native by definition; wine runs Windows binaries only.
bool running_under_wine() { return false; }

}  // namespace baton::os
