// Small facts about the running process that only the OS knows: where our executable lives (to
// find baton-worker next to baton), whether stdout or stderr is a terminal (live progress line or
// plain lines; colour or none), and the per-user folders baton uses by default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace baton::os {

// Absolute path of the running executable; empty if the OS will not say.
std::filesystem::path executable_path();

bool stdout_is_terminal();
bool stderr_is_terminal();

std::int64_t current_pid();

// The machine's physical memory in bytes (sysconf; GlobalMemoryStatusEx); 0 if the OS will not
// say. Job limits are checked against it before a run (protocol::check_job_limits).
std::uint64_t physical_memory_bytes();

// An environment variable, or nullopt when unset.
std::optional<std::string> get_env(const char* name);

// Where `baton run` keeps job state by default: $BATON_STATE_DIR, else $XDG_STATE_HOME/baton,
// else ~/.local/state/baton (Windows: %LOCALAPPDATA%\baton).
std::filesystem::path default_state_dir();

}  // namespace baton::os
