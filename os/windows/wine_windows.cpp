#include <windows.h>

#include "os/wine.h"

namespace baton::os {

// wine's ntdll exports wine_get_version; Windows' never has.
bool running_under_wine() {
  const HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  return ntdll != nullptr && ::GetProcAddress(ntdll, "wine_get_version") != nullptr;
}

}  // namespace baton::os
