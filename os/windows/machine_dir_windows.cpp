#include <windows.h>

#include <string>

#include "os/machine_dir.h"

namespace baton::os {

std::filesystem::path machine_dir() {
  // %ProgramData% rather than SHGetKnownFolderPath: the same answer without linking shell32,
  // and it follows a relocated ProgramData the same way.
  wchar_t buffer[MAX_PATH + 1];
  const DWORD n = ::GetEnvironmentVariableW(L"ProgramData", buffer, MAX_PATH + 1);
  if (n > 0 && n <= MAX_PATH) return std::filesystem::path(std::wstring(buffer, n)) / L"baton";
  return std::filesystem::path(L"C:\\ProgramData\\baton");
}

}  // namespace baton::os
