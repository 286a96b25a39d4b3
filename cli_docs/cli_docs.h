// Documentation generated from a command line definition: a roff man page, a bash completion
// script and a zsh one, each written by walking a CLI11 app (its subcommands, their options,
// flags and positionals). The app stays the one source: a flag added to the CLI appears in the
// man page and the completions at the next build, nothing is listed by hand. The caller owns the
// app; these functions only read it. Hidden subcommands and options (CLI11's empty group) are
// left out, as `--help` leaves them out.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace baton::cli_docs {

// What a man page says besides what the app knows.
struct man_info {
  std::string section = "1";
  std::string version;  // e.g. "baton 0.1.0"
  std::string manual = "User Commands";
  std::string description;            // the DESCRIPTION section; empty: the app's description
  std::string date;                   // e.g. "December 2026"; empty leaves it out
  std::string footer;                 // extra text for an EXIT STATUS section; empty: none
  std::vector<std::string> see_also;  // e.g. {"baton-worker(1)"}
};

// The whole CLI in one page: SYNOPSIS, DESCRIPTION, OPTIONS of the app itself, then a COMMANDS
// section with a subsection per subcommand (nested ones too, as "service install").
std::string man_page(const CLI::App& app, const man_info& info);

// A completion function for `complete -F`: subcommands, the flags of the subcommand being typed,
// and for a positional named in id_positionals (e.g. "ID") the words `id_command` prints, one a
// line, with its stderr silenced (nothing when it fails). Every other positional and every
// option value completes as a file name.
std::string bash_completion(const CLI::App& app, const std::vector<std::string>& id_positionals,
                            const std::string& id_command);

// The same walk for zsh's completion system (a `#compdef` file for a vendor-completions folder),
// with each subcommand's and flag's description.
std::string zsh_completion(const CLI::App& app, const std::vector<std::string>& id_positionals,
                           const std::string& id_command);

// Every visible command path ("run", "service install") with its long flags ("--json"), in the
// order the generators walk them: what a test checks a generated file against.
struct command_flags {
  std::string path;  // empty for the app itself
  std::vector<std::string> long_flags;
};
std::vector<command_flags> visible_commands(const CLI::App& app);

}  // namespace baton::cli_docs
