// `baton __generate man|bash|zsh`: prints baton(1), the bash completion or the zsh one, each
// written by cli_docs from the very app being parsed, so the build (cmake/packaging.cmake) turns
// the CLI definition into the files the .deb installs. Hidden from --help, the man page and the
// completions: it is for the build, not for users. Writes only to the cli_context's out stream.
#pragma once

#include <string>
#include <vector>

#include "supervisor/cli.h"

namespace baton::supervisor {

// The positional names that stand for a job id (completed from the daemon's job list), and the
// command the completions run for them: ids one a line, from `baton list --json` (dump(2): a
// job's own keys are indented by six spaces, its shards' deeper).
inline const std::vector<std::string> job_id_positionals{"ID"};
inline constexpr const char* job_id_command =
    "baton list --json | sed -n 's/^      \"id\": \"\\([^\"]*\\)\".*$/\\1/p'";

// Registers the hidden subcommand; `app` must be the root app with every other command added.
void add_docs_command(CLI::App& app, cli_context& ctx);

// What `__generate man|bash|zsh` prints for this app.
std::string baton_man_page(const CLI::App& app);
std::string baton_bash_completion(const CLI::App& app);
std::string baton_zsh_completion(const CLI::App& app);

}  // namespace baton::supervisor
