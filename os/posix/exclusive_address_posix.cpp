#include "os/exclusive_address.h"

namespace baton::os {

// Linux lets another socket share a bound TCP port only with SO_REUSEPORT set on both sockets by
// the same effective uid; baton never sets it, so the port is already ours alone.
status claim_address_exclusively(native_socket_handle) { return {}; }

}  // namespace baton::os
