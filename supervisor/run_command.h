// `baton run CONFIG`: one job in the foreground with an embedded supervisor, no daemon needed.
// It keeps the job's state in the state directory, so running the same command again resumes
// where a stopped run left off; Ctrl-C asks the worker to checkpoint and stop.
#pragma once

#include <filesystem>

#include "supervisor/cli.h"

namespace baton {

void add_run_command(CLI::App& app, cli_context& ctx);

// The built-in worker: $BATON_WORKER, else baton-worker next to this executable, else the build
// tree's worker/baton-worker beside supervisor/. Empty when none exists.
std::filesystem::path find_worker_executable(env& e);

}  // namespace baton
