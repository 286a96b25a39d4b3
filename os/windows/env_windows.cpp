// Windows env: CreateFileW/WriteFile/FlushFileBuffers, and MoveFileExW for the atomic replace,
// with every failure naming the path and the system's own error text.
#include <algorithm>
#include <cstdint>
#include <cwctype>
#include <system_error>

#include "os/env.h"
#include "os/windows/win_util.h"

namespace baton::os {

namespace {

using os::win::os_error;
using os::win::unique_handle;
using os::win::utf8;

class windows_writable_file final : public writable_file {
 public:
  windows_writable_file(std::filesystem::path path, unique_handle h, bool at_end = false)
      : path_(std::move(path)), h_(std::move(h)), at_end_(at_end) {}

  status append(std::string_view data) override {
    while (!data.empty()) {
      // WriteFile takes a DWORD count: feed huge buffers in pieces.
      const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(data.size(), 1u << 30));
      DWORD written = 0;
      // Offset 0xFFFFFFFF:0xFFFFFFFF writes at the end of the file as FILE_APPEND_DATA would,
      // while the handle keeps GENERIC_WRITE, which FlushFileBuffers needs.
      OVERLAPPED end{};
      end.Offset = end.OffsetHigh = 0xFFFFFFFF;
      if (!::WriteFile(h_.get(), data.data(), chunk, &written, at_end_ ? &end : nullptr)) {
        return os_error("write " + utf8(path_));
      }
      data.remove_prefix(written);
      written_ += written;
    }
    return {};
  }

  status write_at(std::uint64_t offset, std::string_view data) override {
    if (at_end_) return make_error("write " + utf8(path_) + ": opened for appending");
    if (offset > written_ || data.size() > written_ - offset) {
      return make_error("write " + utf8(path_) + " at byte " + std::to_string(offset) + ": " +
                        std::to_string(data.size()) + " bytes run past the " +
                        std::to_string(written_) + " written");
    }
    while (!data.empty()) {
      const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(data.size(), 1u << 30));
      OVERLAPPED at{};
      at.Offset = static_cast<DWORD>(offset & 0xffffffffu);
      at.OffsetHigh = static_cast<DWORD>(offset >> 32);
      DWORD written = 0;
      if (!::WriteFile(h_.get(), data.data(), chunk, &written, &at)) {
        return os_error("write " + utf8(path_));
      }
      data.remove_prefix(written);
      offset += written;
    }
    // A positioned write on a synchronous handle moves its file pointer: back to the end of
    // what was appended, where the next append belongs.
    LARGE_INTEGER end;
    end.QuadPart = static_cast<LONGLONG>(written_);
    if (!::SetFilePointerEx(h_.get(), end, nullptr, FILE_BEGIN)) {
      return os_error("seek " + utf8(path_));
    }
    return {};
  }

  status sync() override {
    if (!::FlushFileBuffers(h_.get())) return os_error("flush " + utf8(path_));
    return {};
  }

  status close() override {
    const HANDLE h = h_.release();
    if (!::CloseHandle(h)) return os_error("close " + utf8(path_));
    return {};
  }

 private:
  std::filesystem::path path_;
  unique_handle h_;
  bool at_end_ = false;
  std::uint64_t written_ = 0;  // bytes appended through this handle
};

class windows_readable_file final : public readable_file {
 public:
  windows_readable_file(std::filesystem::path path, unique_handle h, std::uint64_t size)
      : path_(std::move(path)), h_(std::move(h)), size_(size) {}

  std::uint64_t size() const override { return size_; }

  status read(std::uint64_t offset, std::size_t n, std::string& out) override {
    out.resize(n);
    std::size_t got = 0;
    while (got < n) {
      // An OVERLAPPED offset on a synchronous handle is a positioned read (pread).
      OVERLAPPED at{};
      const std::uint64_t pos = offset + got;
      at.Offset = static_cast<DWORD>(pos & 0xffffffffu);
      at.OffsetHigh = static_cast<DWORD>(pos >> 32);
      const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(n - got, 1u << 30));
      DWORD r = 0;
      if (!::ReadFile(h_.get(), out.data() + got, chunk, &r, &at)) {
        if (::GetLastError() == ERROR_HANDLE_EOF) break;
        return os_error("read " + utf8(path_));
      }
      if (r == 0) break;
      got += r;
    }
    out.resize(got);
    return {};
  }

  status read_into(std::uint64_t offset, std::span<char> out) override {
    std::size_t got = 0;
    while (got < out.size()) {
      OVERLAPPED at{};
      const std::uint64_t pos = offset + got;
      at.Offset = static_cast<DWORD>(pos & 0xffffffffu);
      at.OffsetHigh = static_cast<DWORD>(pos >> 32);
      const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(out.size() - got, 1u << 30));
      DWORD r = 0;
      if (!::ReadFile(h_.get(), out.data() + got, chunk, &r, &at)) {
        if (::GetLastError() != ERROR_HANDLE_EOF) return os_error("read " + utf8(path_));
        r = 0;
      }
      if (r == 0) {
        return with_context("read " + utf8(path_),
                            short_read_error(offset, out.size(), offset + got));
      }
      got += r;
    }
    return {};
  }

 private:
  std::filesystem::path path_;
  unique_handle h_;
  std::uint64_t size_;
};

class windows_env final : public env {
 public:
  result<std::unique_ptr<readable_file>> new_readable_file(
      const std::filesystem::path& path) override {
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_READ,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!h) return os_error("open " + utf8(path));
    LARGE_INTEGER size{};
    if (!::GetFileSizeEx(h.get(), &size)) return os_error("stat " + utf8(path));
    return std::unique_ptr<readable_file>(
        new windows_readable_file(path, std::move(h), static_cast<std::uint64_t>(size.QuadPart)));
  }

  result<std::unique_ptr<readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const untrusted_file_limits& limits) override {
    const std::string what = utf8(path);
    // FILE_FLAG_OPEN_REPARSE_POINT: a symlink or junction is opened itself, never followed, and
    // refused below. CreateFileW does not wait on a named pipe's server the way open(2) waits on
    // a FIFO; GetFileType refuses pipes and devices.
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_READ,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_EXISTING, FILE_FLAG_OPEN_REPARSE_POINT, nullptr));
    if (!h) return os_error("open " + what);
    if (::GetFileType(h.get()) != FILE_TYPE_DISK) {
      return make_error(what + ": a special file (pipe or device), not a regular file");
    }
    BY_HANDLE_FILE_INFORMATION info{};
    if (!::GetFileInformationByHandle(h.get(), &info)) return os_error("stat " + what);
    if (info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) {
      return make_error(what + ": a symlink, not a regular file (links are not followed)");
    }
    if (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) {
      return make_error(what + ": a folder, not a regular file");
    }
    const std::uint64_t size =
        (static_cast<std::uint64_t>(info.nFileSizeHigh) << 32) | info.nFileSizeLow;
    if (size > limits.max_bytes) {
      return make_error(what + ": " + describe_untrusted_size(size, limits.max_bytes));
    }
    if (!limits.within.empty()) {
      const auto final_path = [](HANDLE handle) {
        std::wstring buf(32768, L'\0');
        const DWORD n =
            ::GetFinalPathNameByHandleW(handle, buf.data(), static_cast<DWORD>(buf.size()),
                                        FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
        buf.resize(n > 0 && n < buf.size() ? n : 0);
        for (auto& c : buf) c = static_cast<wchar_t>(::towlower(c));
        return buf;
      };
      unique_handle dir(::CreateFileW(limits.within.c_str(), 0,
                                      FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                                      nullptr, OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr));
      if (!dir) return os_error("open " + utf8(limits.within));
      std::wstring within = final_path(dir.get());
      const std::wstring real = final_path(h.get());
      if (within.empty() || real.empty()) {
        return make_error(what + ": cannot tell where it resolves to");
      }
      if (within.back() != L'\\') within += L'\\';
      if (real.compare(0, within.size(), within) != 0) {
        return make_error(what + ": resolves to " + os::win::narrow(real) + ", outside " +
                          utf8(limits.within));
      }
    }
    return std::unique_ptr<readable_file>(new windows_readable_file(path, std::move(h), size));
  }

  result<std::unique_ptr<writable_file>> new_writable_file(
      const std::filesystem::path& path) override {
    // FILE_SHARE_DELETE: a reader holding the old file open must not block the rename over it.
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_DELETE,
                                  nullptr, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!h) return os_error("open " + utf8(path));
    return std::unique_ptr<writable_file>(new windows_writable_file(path, std::move(h)));
  }

  result<std::unique_ptr<writable_file>> new_appendable_file(
      const std::filesystem::path& path) override {
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_WRITE,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!h) return os_error("open " + utf8(path));
    return std::unique_ptr<writable_file>(new windows_writable_file(path, std::move(h), true));
  }

  result<std::string> read_file(const std::filesystem::path& path) override {
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_READ,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!h) return os_error("open " + utf8(path));
    std::string out;
    LARGE_INTEGER size{};
    if (::GetFileSizeEx(h.get(), &size) && size.QuadPart > 0) {
      out.reserve(static_cast<std::size_t>(size.QuadPart));
    }
    char buf[1 << 16];
    for (;;) {
      DWORD n = 0;
      if (!::ReadFile(h.get(), buf, sizeof buf, &n, nullptr)) return os_error("read " + utf8(path));
      if (n == 0) break;
      out.append(buf, n);
    }
    return out;
  }

  status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) override {
    // WRITE_THROUGH: MoveFileExW returns only once the rename is on disk, which is what
    // sync_dir gives on POSIX.
    if (!::MoveFileExW(from.c_str(), to.c_str(),
                       MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
      return os_error("rename " + utf8(from) + " to " + utf8(to));
    }
    return {};
  }

  status remove_file(const std::filesystem::path& path) override {
    if (!::DeleteFileW(path.c_str())) return os_error("remove " + utf8(path));
    return {};
  }

  // Windows offers no user-mode way to flush a folder's entries (FlushFileBuffers on a folder
  // handle is refused; on a volume it needs administrator rights). It needs none: NTFS journals
  // metadata, and rename_file's MOVEFILE_WRITE_THROUGH already waits for the rename to reach disk.
  status sync_dir(const std::filesystem::path&) override { return {}; }

  status create_dirs(const std::filesystem::path& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error("create folder " + utf8(dir) + ": " + ec.message());
    return {};
  }

  status remove_dir_all(const std::filesystem::path& dir) override {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) return make_error("remove " + utf8(dir) + ": " + ec.message());
    return {};
  }

  result<entry_info> stat_no_follow(const std::filesystem::path& path) override {
    std::error_code ec;
    const auto st = std::filesystem::symlink_status(path, ec);
    if (ec && st.type() != std::filesystem::file_type::not_found) {
      return make_error("stat " + utf8(path) + ": " + ec.message());
    }
    entry_info info;
    switch (st.type()) {
      case std::filesystem::file_type::not_found:
        break;
      case std::filesystem::file_type::regular: {
        info.kind = entry_kind::regular;
        const auto size = std::filesystem::file_size(path, ec);
        if (ec) return make_error("stat " + utf8(path) + ": " + ec.message());
        info.size = static_cast<std::uint64_t>(size);
        break;
      }
      case std::filesystem::file_type::directory:
        info.kind = entry_kind::directory;
        break;
      case std::filesystem::file_type::symlink:
        info.kind = entry_kind::symlink;
        break;
      default:  // junctions and other reparse points are links to elsewhere as well
        info.kind = entry_kind::other;
        break;
    }
    return info;
  }

  status sync_file(const std::filesystem::path& path) override {
    // FlushFileBuffers needs a handle with write access, though nothing is written.
    unique_handle h(::CreateFileW(path.c_str(), GENERIC_WRITE,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_EXISTING, FILE_FLAG_OPEN_REPARSE_POINT, nullptr));
    if (!h) return os_error("open " + utf8(path));
    if (!::FlushFileBuffers(h.get())) return os_error("flush " + utf8(path));
    return {};
  }

  bool file_exists(const std::filesystem::path& path) override {
    return ::GetFileAttributesW(path.c_str()) != INVALID_FILE_ATTRIBUTES;
  }

  result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override {
    WIN32_FIND_DATAW entry{};
    const std::filesystem::path pattern = dir / L"*";
    const HANDLE find = ::FindFirstFileW(pattern.c_str(), &entry);
    if (find == INVALID_HANDLE_VALUE) return os_error("list folder " + utf8(dir));
    std::vector<std::string> names;
    DWORD err = ERROR_NO_MORE_FILES;
    do {
      const std::wstring_view name = entry.cFileName;
      if (name == L"." || name == L"..") continue;
      names.push_back(os::win::narrow(name));
    } while (::FindNextFileW(find, &entry) || (err = ::GetLastError()) != ERROR_NO_MORE_FILES);
    ::FindClose(find);
    if (err != ERROR_NO_MORE_FILES) return os_error("list folder " + utf8(dir), err);
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

env& env::default_env() {
  static windows_env* instance = new windows_env;  // never destroyed: used from exit paths too
  return *instance;
}

result<std::unique_ptr<env>> make_no_follow_env(const std::filesystem::path& root) {
  return make_error("no-follow env for " + utf8(root) +
                    ": not supported on Windows (it serves system mode's job folders, and "
                    "Windows has no system mode)");
}

}  // namespace baton::os
