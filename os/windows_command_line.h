// How a Windows program receives its arguments: one command-line string that the C runtime and
// CommandLineToArgvW split back into argv. Pure code, used both to spawn workers
// (os/windows/process_windows.cpp) and to register the service's command with the SCM
// (supervisor/service_command.cpp), and unit-tested on every platform.
#pragma once

#include <string>
#include <vector>

namespace baton::os {

// argv as one command line that CommandLineToArgvW and the C runtime split back into the same
// arguments (quotes only where needed; backslashes doubled only before a quote). UTF-8 in and
// out: the characters that matter are ASCII, which never occur inside a multi-byte sequence.
std::string windows_command_line(const std::vector<std::string>& argv);

}  // namespace baton::os
