#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "os/peer_credentials.h"
#include "os/posix/errno_text.h"
#include "os/private_file.h"
#include "os/system.h"

namespace baton::os {

namespace {

status write_all(int fd, std::string_view data, const std::string& name) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot write " + name + ": " + errno_text(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

status write_private_file(const std::filesystem::path& path, std::string_view contents,
                          const std::optional<std::string>& group) {
  std::optional<std::uint32_t> gid;
  if (group) {
    auto g = find_group(*group);
    if (!g) return g.error();
    gid = *g;
  }
  const std::string tmp = path.string() + ".tmp-" + std::to_string(current_pid());
  ::unlink(tmp.c_str());  // a leftover of a crashed writer with our pid; ours to replace
  // O_EXCL with 0600: the secret is never readable by anyone else, not even for a moment.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return make_error("cannot create " + tmp + ": " + errno_text(errno));
  auto fail = [&](error e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  };
  if (gid) {
    if (::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(*gid)) != 0) {
      return fail(
          make_error("cannot give " + tmp + " the group '" + *group + "': " + errno_text(errno)));
    }
    if (::fchmod(fd, 0640) != 0) {
      return fail(make_error("cannot set mode 0640 on " + tmp + ": " + errno_text(errno)));
    }
  }
  if (auto s = write_all(fd, contents, tmp); !s) return fail(s.error());
  if (::fsync(fd) != 0) return fail(make_error("cannot flush " + tmp + ": " + errno_text(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_error("cannot close " + tmp + ": " + errno_text(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error("cannot rename " + tmp + " to " + path.string() + ": " + errno_text(e));
  }
  return {};
}

result<std::string> describe_file_access(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return make_error("cannot stat " + path.string() + ": " + errno_text(errno));
  }
  char text[32];
  std::snprintf(text, sizeof text, "mode %04o", static_cast<unsigned>(st.st_mode & 07777));
  return std::string(text);
}

}  // namespace baton::os
