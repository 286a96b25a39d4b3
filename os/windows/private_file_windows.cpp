// The endpoint file's access control on Windows. The security descriptor is given to CreateFileW
// itself, so the file is never readable by anyone else, not even between creation and a later
// SetSecurityInfo. "D:P" marks the DACL protected: ACEs of the folder (ProgramData lets Users
// read) are not inherited. MoveFileExW on one volume keeps the descriptor.
#include <windows.h>
// windows.h first: sddl.h and aclapi.h need its types.
#include <aclapi.h>
#include <sddl.h>

#include <algorithm>
#include <vector>

#include "os/private_file.h"
#include "os/system.h"
#include "os/windows/win_util.h"

namespace baton::os {

namespace {

std::wstring sid_string(PSID sid) {
  wchar_t* text = nullptr;
  if (!::ConvertSidToStringSidW(sid, &text)) return {};
  std::wstring out(text);
  ::LocalFree(text);
  return out;
}

// The user this process runs as (SYSTEM for a LocalSystem service).
result<std::wstring> current_user_sid() {
  HANDLE raw = nullptr;
  if (!::OpenProcessToken(::GetCurrentProcess(), TOKEN_QUERY, &raw)) {
    return win::os_error("cannot open this process's token");
  }
  win::unique_handle token(raw);
  DWORD size = 0;
  ::GetTokenInformation(token.get(), TokenUser, nullptr, 0, &size);
  std::vector<unsigned char> buffer(size > 0 ? size : 256);
  if (!::GetTokenInformation(token.get(), TokenUser, buffer.data(),
                             static_cast<DWORD>(buffer.size()), &size)) {
    return win::os_error("cannot read this process's user");
  }
  auto sid = sid_string(reinterpret_cast<TOKEN_USER*>(buffer.data())->User.Sid);
  if (sid.empty()) return win::os_error("cannot format this process's user SID");
  return sid;
}

result<std::wstring> group_sid(const std::string& name) {
  const std::wstring wide = win::widen(name);
  DWORD sid_size = 0, domain_size = 0;
  SID_NAME_USE use{};
  ::LookupAccountNameW(nullptr, wide.c_str(), nullptr, &sid_size, nullptr, &domain_size, &use);
  if (sid_size == 0) return win::os_error("group '" + name + "' does not exist");
  std::vector<unsigned char> sid(sid_size);
  std::wstring domain(domain_size + 1, L'\0');
  if (!::LookupAccountNameW(nullptr, wide.c_str(), sid.data(), &sid_size, domain.data(),
                            &domain_size, &use)) {
    return win::os_error("group '" + name + "' does not exist");
  }
  auto text = sid_string(sid.data());
  if (text.empty()) return win::os_error("cannot format the SID of group '" + name + "'");
  return text;
}

}  // namespace

status write_private_file(const std::filesystem::path& path, std::string_view contents,
                          const std::optional<std::string>& group) {
  auto user = current_user_sid();
  if (!user) return user.error();
  // FA: full access; FR: generic read. SY = LocalSystem, BA = the Administrators group.
  std::wstring sddl = L"D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;FA;;;" + *user + L")";
  if (group) {
    auto g = group_sid(*group);
    if (!g) return g.error();
    sddl += L"(A;;FR;;;" + *g + L")";
  }
  PSECURITY_DESCRIPTOR sd = nullptr;
  if (!::ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl.c_str(), SDDL_REVISION_1, &sd,
                                                              nullptr)) {
    return win::os_error("cannot build the security descriptor for " + win::utf8(path));
  }
  struct sd_free {
    PSECURITY_DESCRIPTOR p;
    ~sd_free() { ::LocalFree(p); }
  } owned{sd};
  SECURITY_ATTRIBUTES sa{sizeof sa, sd, FALSE};

  std::filesystem::path tmp = path;
  tmp += L".tmp-" + std::to_wstring(current_pid());
  ::DeleteFileW(tmp.c_str());  // a leftover of a crashed writer with our pid; ours to replace
  win::unique_handle file(::CreateFileW(tmp.c_str(), GENERIC_WRITE, 0, &sa, CREATE_NEW,
                                        FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!file) return win::os_error("cannot create " + win::utf8(tmp));
  auto fail = [&](error e) {
    file.reset();
    ::DeleteFileW(tmp.c_str());
    return e;
  };
  while (!contents.empty()) {
    DWORD written = 0;
    const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(contents.size(), 1 << 20));
    if (!::WriteFile(file.get(), contents.data(), chunk, &written, nullptr)) {
      return fail(win::os_error("cannot write " + win::utf8(tmp)));
    }
    contents.remove_prefix(written);
  }
  if (!::FlushFileBuffers(file.get())) return fail(win::os_error("cannot flush " + win::utf8(tmp)));
  file.reset();
  if (!::MoveFileExW(tmp.c_str(), path.c_str(),
                     MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
    const DWORD e = ::GetLastError();
    ::DeleteFileW(tmp.c_str());
    return win::os_error("cannot rename " + win::utf8(tmp) + " to " + win::utf8(path), e);
  }
  return {};
}

result<std::string> describe_file_access(const std::filesystem::path& path) {
  PSECURITY_DESCRIPTOR sd = nullptr;
  const DWORD rc = ::GetNamedSecurityInfoW(path.c_str(), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION,
                                           nullptr, nullptr, nullptr, nullptr, &sd);
  if (rc != ERROR_SUCCESS) {
    return win::os_error("cannot read the security descriptor of " + win::utf8(path), rc);
  }
  wchar_t* text = nullptr;
  const BOOL ok = ::ConvertSecurityDescriptorToStringSecurityDescriptorW(
      sd, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, &text, nullptr);
  const DWORD e = ::GetLastError();
  ::LocalFree(sd);
  if (!ok) return win::os_error("cannot format the security descriptor of " + win::utf8(path), e);
  std::string out = win::narrow(text);
  ::LocalFree(text);
  return out;
}

}  // namespace baton::os
