// Keeps other local processes from binding the control API's TCP port while the daemon listens.
// On Windows a second socket with SO_REUSEADDR may bind a port already in use and receive its
// connections (and so the clients' bearer tokens) unless the first set SO_EXCLUSIVEADDRUSE.
// Linux already refuses that to other users (SO_REUSEPORT needs the same uid), so it is a no-op
// there. The caller owns the socket; call between open() and bind().
// Implementations: os/posix/exclusive_address_posix.cpp, os/windows/exclusive_address_windows.cpp.
#pragma once

#include "base/status.h"
#include "os/peer_credentials.h"

namespace baton::os {

status claim_address_exclusively(native_socket_handle socket);

}  // namespace baton::os
