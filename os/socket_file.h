// The file side of a Unix control socket: the checks and modes a listener needs around bind(),
// kept here because they are file-system calls (the listener in supervisor/ only binds, listens
// and accepts). Windows serves the control API on loopback TCP (peer_credentials.h): there every
// call refuses with that reason. Implementations: os/posix/socket_file_posix.cpp,
// os/windows/socket_file_windows.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "base/status.h"

namespace baton::os {

// sockaddr_un::sun_path is 108 bytes on Linux (104 on the BSDs), including the terminating NUL.
inline constexpr std::size_t max_socket_path = 107;

// An empty path or one too long for sockaddr_un is an error naming the length.
status check_socket_path_length(const std::filesystem::path& path);

// A socket file outlives a daemon that was killed. It is ours to replace only if nobody answers
// on it: connected (or a full backlog, which also means a listener) is a live daemon. Anything
// that is not a socket is never removed.
status remove_stale_socket(const std::filesystem::path& path);

// The socket's folder. One we create is 0750 (and gets `gid`), so only its owner and group can
// even reach the socket. An existing folder is left alone: it may be /run or a runtime dir.
status prepare_socket_folder(const std::filesystem::path& dir, std::optional<std::uint32_t> gid);

// Mode 0660 on a bound socket, and its group when one is given.
status set_socket_access(const std::filesystem::path& path, std::optional<std::uint32_t> gid);

// Removes the socket file at stop; a missing file is not an error.
void remove_socket_file(const std::filesystem::path& path);

}  // namespace baton::os
