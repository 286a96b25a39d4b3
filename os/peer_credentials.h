// Who is on the other end of a local socket, and the user/group facts needed to decide whether
// to talk to them: the control server asks the kernel for a connected peer's identity (SO_PEERCRED
// and SO_PEERGROUPS on Linux) rather than trusting anything the peer says. Also the few calls
// that give the control socket file its group, and the user-database lookup that gives a worker
// run as its submitter that user's login (find_user). Windows has none of this (and wine cannot
// open AF_UNIX sockets): there the control API uses loopback TCP and a bearer token instead.
// Implementations: os/posix/peer_credentials_posix.cpp, os/windows/peer_credentials_windows.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace baton::os {

#ifdef _WIN32
using native_socket_handle = std::uintptr_t;
#else
using native_socket_handle = int;
#endif

// Whether get_peer_credentials() can identify a peer here. It decides the control API's
// transport: a Unix socket checked by credentials, else loopback TCP with a bearer token.
#ifdef _WIN32
inline constexpr bool peer_credentials_supported = false;
#else
inline constexpr bool peer_credentials_supported = true;
#endif

// The identity of a connected peer as the kernel recorded it at connect() time.
struct peer_credentials {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::int64_t pid = 0;
  std::vector<std::uint32_t> groups;  // supplementary groups; may be empty where unsupported
};

result<peer_credentials> get_peer_credentials(native_socket_handle socket);

// The effective uid of this process.
std::uint32_t current_uid();

// The gid of a named group; an error naming the group when it does not exist.
result<std::uint32_t> find_group(const std::string& name);

// A user's entry in the user database (passwd, NSS): what a login of that user gets as USER,
// LOGNAME, HOME and SHELL.
struct user_account {
  std::string name;
  std::string home;
  std::string shell;
};

// The account of `uid`; unset when the database has none (the kernel takes any uid, and so does
// baton). An error only when the lookup itself fails. Windows: always an error.
result<std::optional<user_account>> find_user(std::uint32_t uid);

// Gives `path` the group `gid` (the owner is unchanged).
status set_file_group(const std::filesystem::path& path, std::uint32_t gid);

}  // namespace baton::os
