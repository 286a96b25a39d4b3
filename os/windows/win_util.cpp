#include "os/windows/win_util.h"

#include <cstdio>

namespace baton::os::win {

std::wstring widen(std::string_view utf8) {
  if (utf8.empty()) return {};
  const int n =
      ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), nullptr, 0);
  std::wstring out(static_cast<std::size_t>(n), L'\0');
  ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), out.data(), n);
  return out;
}

std::string narrow(std::wstring_view utf16) {
  if (utf16.empty()) return {};
  const int n = ::WideCharToMultiByte(CP_UTF8, 0, utf16.data(), static_cast<int>(utf16.size()),
                                      nullptr, 0, nullptr, nullptr);
  std::string out(static_cast<std::size_t>(n), '\0');
  ::WideCharToMultiByte(CP_UTF8, 0, utf16.data(), static_cast<int>(utf16.size()), out.data(), n,
                        nullptr, nullptr);
  return out;
}

std::string utf8(const std::filesystem::path& path) { return narrow(path.native()); }

std::string error_text(DWORD code) {
  wchar_t* buf = nullptr;
  const DWORD n = ::FormatMessageW(
      FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
      nullptr, code, 0, reinterpret_cast<wchar_t*>(&buf), 0, nullptr);
  std::wstring text = n != 0 && buf != nullptr ? std::wstring(buf, n) : std::wstring();
  if (buf != nullptr) ::LocalFree(buf);
  while (!text.empty() && (text.back() == L'\n' || text.back() == L'\r' || text.back() == L' ' ||
                           text.back() == L'.')) {
    text.pop_back();
  }
  if (text.empty()) text = L"unknown error";
  return narrow(text) + " (error " + std::to_string(code) + ")";
}

error os_error(const std::string& what, DWORD code) {
  // A full disk or quota carries errc::no_space: the caller pauses rather than fails.
  // ERROR_DISK_QUOTA_EXCEEDED (1295) is missing from mingw's headers; its value is fixed.
  constexpr DWORD disk_quota_exceeded = 1295;
  const bool full =
      code == ERROR_DISK_FULL || code == ERROR_HANDLE_DISK_FULL || code == disk_quota_exceeded;
  return make_error(what + ": " + error_text(code), full ? errc::no_space : errc::unspecified);
}

}  // namespace baton::os::win
