// Moved to base/status.h (os/ needs it too, and protocol/ links os/). Kept only so that files
// still naming the old path compile; include "base/status.h" instead.
#pragma once
#include "base/status.h"
