// `baton checkpoint verify PATH`: checks a checkpoint by hand, a baton checkpoint file or a
// sealed checkpoint folder, exactly as the supervisor does before it resumes from one. Reads
// through the cli_context's env; writes only to its streams.
#pragma once

#include "supervisor/cli.h"

namespace baton::supervisor {

void add_checkpoint_command(CLI::App& app, cli_context& ctx);

}  // namespace baton::supervisor
