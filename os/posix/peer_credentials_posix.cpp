#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "os/peer_credentials.h"
#include "os/posix/errno_text.h"

namespace baton::os {

result<peer_credentials> get_peer_credentials(native_socket_handle socket) {
  peer_credentials out;
#if defined(SO_PEERCRED)
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return make_error("cannot read peer credentials (SO_PEERCRED): " + errno_text(errno));
  }
  out.uid = cred.uid;
  out.gid = cred.gid;
  out.pid = cred.pid;
#else
  uid_t uid = 0;
  gid_t gid = 0;
  if (::getpeereid(socket, &uid, &gid) != 0) {
    return make_error("cannot read peer credentials (getpeereid): " + errno_text(errno));
  }
  out.uid = uid;
  out.gid = gid;
#endif
#if defined(SO_PEERGROUPS)
  // The kernel's snapshot of the peer's groups at connect() (Linux 4.13+): better than looking
  // the uid up in /etc/group, which misses groups granted by newgrp, sg or a service manager.
  std::vector<gid_t> groups(64);
  while (true) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      break;
    }
    if (errno == ERANGE && glen > groups.size() * sizeof(gid_t)) {
      groups.resize(glen / sizeof(gid_t));
      continue;
    }
    if (errno == ENOPROTOOPT) {  // older kernel: primary gid only
      groups.clear();
      break;
    }
    return make_error("cannot read peer groups (SO_PEERGROUPS): " + errno_text(errno));
  }
  out.groups.assign(groups.begin(), groups.end());
#endif
  return out;
}

std::uint32_t current_uid() { return ::geteuid(); }

result<std::uint32_t> find_group(const std::string& name) {
  long size = ::sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<std::size_t>(size) : 16384);
  struct group entry {};
  struct group* found = nullptr;
  int rc = 0;
  while ((rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) ==
         ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  if (rc != 0) return make_error("cannot look up group '" + name + "': " + errno_text(rc));
  if (found == nullptr) return make_error("group '" + name + "' does not exist");
  return static_cast<std::uint32_t>(found->gr_gid);
}

result<std::optional<user_account>> find_user(std::uint32_t uid) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<std::size_t>(size) : 16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  int rc = 0;
  while ((rc = ::getpwuid_r(static_cast<uid_t>(uid), &entry, buffer.data(), buffer.size(),
                            &found)) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  // getpwuid_r(3): "not found" may come back as 0 with no entry, or as one of these.
  if (found == nullptr && (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM)) {
    return std::optional<user_account>();
  }
  if (rc != 0) {
    return make_error("cannot look up uid " + std::to_string(uid) + ": " + errno_text(rc));
  }
  return std::optional<user_account>(user_account{found->pw_name ? found->pw_name : "",
                                                  found->pw_dir ? found->pw_dir : "",
                                                  found->pw_shell ? found->pw_shell : ""});
}

status set_file_group(const std::filesystem::path& path, std::uint32_t gid) {
  if (::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0) {
    return make_error("cannot give " + path.string() + " the group " + std::to_string(gid) + ": " +
                      errno_text(errno));
  }
  return {};
}

}  // namespace baton::os
