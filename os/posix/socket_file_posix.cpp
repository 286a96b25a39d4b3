// The socket's file checks, by std::filesystem and a non-blocking probe connect (socket_file.h).
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <string>
#include <system_error>

#include "os/peer_credentials.h"
#include "os/socket_file.h"

namespace baton::os {

namespace {
namespace asio = boost::asio;
namespace fs = std::filesystem;
using local = asio::local::stream_protocol;
}  // namespace

status check_socket_path_length(const fs::path& path) {
  if (path.native().empty()) return make_error("socket path is empty");
  if (path.native().size() > max_socket_path) {
    return make_error("socket path " + path.string() + " is " +
                      std::to_string(path.native().size()) + " bytes; Unix sockets allow at most " +
                      std::to_string(max_socket_path));
  }
  return {};
}

status remove_stale_socket(const fs::path& path) {
  std::error_code fec;
  const auto st = fs::symlink_status(path, fec);
  if (fec || !fs::exists(st)) return {};
  if (!fs::is_socket(st)) {
    return make_error(path.string() + " exists and is not a socket; not removing it");
  }
  asio::io_context probe_io;
  local::socket probe(probe_io);
  boost::system::error_code ec;
  probe.open(local(), ec);
  if (!ec) probe.non_blocking(true, ec);
  if (!ec) probe.connect(local::endpoint(path.string()), ec);
  if (!ec || ec == asio::error::would_block || ec == asio::error::try_again ||
      ec == asio::error::in_progress) {
    return make_error("another baton daemon is listening on " + path.string());
  }
  if (ec != asio::error::connection_refused) {
    return make_error("cannot check whether " + path.string() + " is in use: " + ec.message());
  }
  if (!fs::remove(path, fec) && fec) {
    return make_error("cannot remove stale socket " + path.string() + ": " + fec.message());
  }
  return {};
}

status prepare_socket_folder(const fs::path& dir, std::optional<std::uint32_t> gid) {
  if (dir.empty()) return {};
  std::error_code fec;
  if (fs::exists(dir, fec)) {
    if (!fs::is_directory(dir, fec))
      return make_error(dir.string() + " exists and is not a folder");
    return {};
  }
  fs::create_directories(dir, fec);
  if (fec) return make_error("cannot create folder " + dir.string() + ": " + fec.message());
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                  fs::perm_options::replace, fec);
  if (fec) return make_error("cannot set mode 0750 on " + dir.string() + ": " + fec.message());
  if (gid) return set_file_group(dir, *gid);
  return {};
}

status set_socket_access(const fs::path& path, std::optional<std::uint32_t> gid) {
  std::error_code fec;
  fs::permissions(path,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                      fs::perms::group_write,
                  fs::perm_options::replace, fec);
  if (fec) return make_error("cannot set mode 0660 on " + path.string() + ": " + fec.message());
  if (gid) return set_file_group(path, *gid);
  return {};
}

void remove_socket_file(const fs::path& path) {
  std::error_code ignored;  // at stop: a socket already gone is the goal, not a failure
  fs::remove(path, ignored);
}

}  // namespace baton::os
