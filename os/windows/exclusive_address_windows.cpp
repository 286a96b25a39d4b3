#include <winsock2.h>
// winsock2.h before windows.h (pulled in by win_util.h), or winsock 1 definitions clash.
#include "os/exclusive_address.h"
#include "os/windows/win_util.h"

namespace baton::os {

status claim_address_exclusively(native_socket_handle socket) {
  const BOOL on = TRUE;
  if (::setsockopt(static_cast<SOCKET>(socket), SOL_SOCKET, SO_EXCLUSIVEADDRUSE,
                   reinterpret_cast<const char*>(&on), sizeof on) != 0) {
    return win::os_error("cannot reserve the control port (SO_EXCLUSIVEADDRUSE)",
                         static_cast<DWORD>(::WSAGetLastError()));
  }
  return {};
}

}  // namespace baton::os
