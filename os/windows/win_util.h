// Small Win32 helpers shared by os/windows/*.cpp: UTF-8 <-> UTF-16 conversion, GetLastError
// text, and an owning HANDLE. Windows APIs are called in their W form everywhere; baton's own
// strings (paths in messages, argv, environment) are UTF-8. Private to os/windows/.
#pragma once

#include <windows.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace baton::os::win {

std::wstring widen(std::string_view utf8);
std::string narrow(std::wstring_view utf16);
// A path as UTF-8, for messages (path::string() converts through the C locale on mingw).
std::string utf8(const std::filesystem::path& path);

// "The system cannot find the file specified. (error 2)": FormatMessageW's text in UTF-8.
std::string error_text(DWORD code);
// "<what>: <error_text(code)>".
error os_error(const std::string& what, DWORD code = ::GetLastError());

// Owns one kernel handle; null and INVALID_HANDLE_VALUE both mean "none".
class unique_handle {
 public:
  unique_handle() = default;
  explicit unique_handle(HANDLE h) : h_(h) {}
  unique_handle(unique_handle&& o) noexcept : h_(o.release()) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;
  ~unique_handle() { reset(); }

  HANDLE get() const { return h_; }
  bool valid() const { return h_ != nullptr && h_ != INVALID_HANDLE_VALUE; }
  explicit operator bool() const { return valid(); }
  HANDLE release() { return std::exchange(h_, nullptr); }
  void reset(HANDLE h = nullptr) {
    if (valid()) ::CloseHandle(h_);
    h_ = h;
  }

 private:
  HANDLE h_ = nullptr;
};

}  // namespace baton::os::win
