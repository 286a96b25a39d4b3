// LockFileEx on <state dir>\baton.lock. Windows locks are mandatory for the byte range they
// cover, so the lock is on one byte far past the end of the file (offset 2^32) and the holder's
// "<pid> <role>" at offset 0 stays readable by a refused process. The handle is not inheritable
// (no SECURITY_ATTRIBUTES), so workers never carry the lock.
#include <windows.h>

#include "os/state_lock.h"
#include "os/system.h"
#include "os/windows/win_util.h"

namespace baton::os {

namespace {

constexpr DWORD lock_offset_high = 1;  // byte 2^32: never part of the text

std::string read_all(HANDLE h) {
  std::string out(4096, '\0');
  OVERLAPPED at{};
  DWORD n = 0;
  if (!::ReadFile(h, out.data(), static_cast<DWORD>(out.size()), &n, &at)) return {};
  out.resize(n);
  return out;
}

class windows_state_lock final : public state_lock {
 public:
  windows_state_lock(win::unique_handle h, std::filesystem::path path)
      : h_(std::move(h)), path_(std::move(path)) {}
  ~windows_state_lock() override {
    OVERLAPPED at{};
    at.OffsetHigh = lock_offset_high;
    ::UnlockFileEx(h_.get(), 0, 1, 0, &at);
  }
  const std::filesystem::path& path() const override { return path_; }

 private:
  win::unique_handle h_;
  std::filesystem::path path_;
};

class windows_state_locker final : public state_locker {
 public:
  boost::system::result<std::unique_ptr<state_lock>, lock_refusal> lock(
      const std::filesystem::path& dir, std::string_view role) override {
    const auto file = dir / state_lock_file_name;
    const auto io_failure = [&](const std::string& what, DWORD code) {
      return lock_refusal{win::os_error("cannot lock state directory " + win::utf8(dir) + ": " +
                                            what + " " + win::utf8(file),
                                        code),
                          false, std::nullopt};
    };
    win::unique_handle h(::CreateFileW(file.wstring().c_str(), GENERIC_READ | GENERIC_WRITE,
                                       FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                                       nullptr, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!h) return io_failure("open", ::GetLastError());
    OVERLAPPED at{};
    at.OffsetHigh = lock_offset_high;
    if (!::LockFileEx(h.get(), LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &at)) {
      const DWORD code = ::GetLastError();
      if (code != ERROR_LOCK_VIOLATION && code != ERROR_IO_PENDING) {
        return io_failure("LockFileEx", code);
      }
      auto holder = parse_lock_holder(read_all(h.get()));
      if (!holder) {
        ::Sleep(50);
        holder = parse_lock_holder(read_all(h.get()));
      }
      return lock_refusal{make_error(held_message(dir, file, holder)), true, holder};
    }
    const std::string text = format_lock_holder({current_pid(), std::string(role)});
    OVERLAPPED start{};
    DWORD written = 0;
    if (!::WriteFile(h.get(), text.data(), static_cast<DWORD>(text.size()), &written, &start) ||
        written != text.size()) {
      return io_failure("write", ::GetLastError());
    }
    LARGE_INTEGER end{};
    end.QuadPart = static_cast<LONGLONG>(text.size());
    if (!::SetFilePointerEx(h.get(), end, nullptr, FILE_BEGIN) || !::SetEndOfFile(h.get())) {
      return io_failure("truncate", ::GetLastError());
    }
    return std::unique_ptr<state_lock>(std::make_unique<windows_state_lock>(std::move(h), file));
  }
};

}  // namespace

state_locker& os_state_locker() {
  static windows_state_locker* locker = new windows_state_locker;  // never destroyed
  return *locker;
}

}  // namespace baton::os
