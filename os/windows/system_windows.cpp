// <windows.h> (via win_util.h) must precede the other Win32 headers.
// clang-format off
#include "os/windows/win_util.h"
#include <psapi.h>
// clang-format on

#include <cstdlib>

#include "os/self_memory.h"
#include "os/system.h"

namespace baton::os {

std::filesystem::path executable_path() {
  std::wstring buf(32768, L'\0');
  const DWORD n = ::GetModuleFileNameW(nullptr, buf.data(), static_cast<DWORD>(buf.size()));
  if (n == 0 || n >= buf.size()) return {};
  buf.resize(n);
  return std::filesystem::path(buf);
}

bool stdout_is_terminal() {
  DWORD mode = 0;
  return ::GetConsoleMode(::GetStdHandle(STD_OUTPUT_HANDLE), &mode) != 0;
}

bool stderr_is_terminal() {
  DWORD mode = 0;
  return ::GetConsoleMode(::GetStdHandle(STD_ERROR_HANDLE), &mode) != 0;
}

result<std::uint64_t> own_rss_bytes() {
  PROCESS_MEMORY_COUNTERS counters{};
  counters.cb = sizeof counters;
  if (!::GetProcessMemoryInfo(::GetCurrentProcess(), &counters, sizeof counters)) {
    return make_error("cannot read this process's working set (GetProcessMemoryInfo failed)");
  }
  return static_cast<std::uint64_t>(counters.WorkingSetSize);
}

result<std::uint64_t> waited_children_peak_rss_bytes() {
  // Windows keeps a peak per process handle (PeakWorkingSetSize), not over waited-for children.
  return make_error("the peak memory of waited-for children is not accounted on Windows");
}

std::int64_t current_pid() { return static_cast<std::int64_t>(::GetCurrentProcessId()); }

std::uint64_t physical_memory_bytes() {
  MEMORYSTATUSEX status{};
  status.dwLength = sizeof status;
  if (!::GlobalMemoryStatusEx(&status)) return 0;
  return status.ullTotalPhys;
}

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::filesystem::path default_state_dir() {
  if (auto d = get_env("BATON_STATE_DIR"); d && !d->empty()) return *d;
  if (auto d = get_env("LOCALAPPDATA"); d && !d->empty()) {
    return std::filesystem::path(*d) / "baton";
  }
  return std::filesystem::temp_directory_path() / "baton-state";
}

}  // namespace baton::os
