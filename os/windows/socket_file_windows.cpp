// Windows never serves the control API on a Unix socket (peer_credentials_supported is false:
// the listener there is loopback TCP with a token), so the socket file calls refuse, naming why,
// rather than pretend to set a mode that NTFS does not have.
#include "os/socket_file.h"

namespace baton::os {

namespace {
error not_here(const std::filesystem::path& path) {
  return make_error("Unix control socket " + path.string() +
                    ": not used on Windows (the control API is loopback TCP with a token)");
}
}  // namespace

status check_socket_path_length(const std::filesystem::path& path) { return not_here(path); }
status remove_stale_socket(const std::filesystem::path& path) { return not_here(path); }
status prepare_socket_folder(const std::filesystem::path& dir, std::optional<std::uint32_t>) {
  return not_here(dir);
}
status set_socket_access(const std::filesystem::path& path, std::optional<std::uint32_t>) {
  return not_here(path);
}
void remove_socket_file(const std::filesystem::path&) {}

}  // namespace baton::os
