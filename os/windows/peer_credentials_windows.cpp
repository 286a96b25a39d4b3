// Windows has no uids or SO_PEERCRED. The control API on Windows uses loopback TCP with a bearer
// token kept in a file only Administrators, SYSTEM and the daemon's account can read
// (os/private_file.h); every call here says it is unsupported instead of pretending to check.
#include "os/peer_credentials.h"

namespace baton::os {

result<peer_credentials> get_peer_credentials(native_socket_handle) {
  return make_error(
      "peer credentials: not supported on Windows (the control API uses a bearer token here)");
}

// No uid on Windows; 0 only labels the daemon's own identity in status output.
std::uint32_t current_uid() { return 0; }

result<std::uint32_t> find_group(const std::string& name) {
  return make_error("group \"" + name + "\": Unix groups do not exist on Windows");
}

result<std::optional<user_account>> find_user(std::uint32_t uid) {
  return make_error("uid " + std::to_string(uid) + ": Unix accounts do not exist on Windows");
}

status set_file_group(const std::filesystem::path& path, std::uint32_t) {
  return make_error("set group of " + path.string() + ": not supported on Windows");
}

}  // namespace baton::os
