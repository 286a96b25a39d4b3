// The `baton` command line: one CLI11 app with a subcommand per verb (validate, run, serve,
// service, and the client verbs of client_command.h). Each verb lives in an add_*_command
// function (declared in its own *_command.h, validate's here) that registers its options and
// a callback on the app; run_cli owns parsing and turns every outcome into an exit code, so the
// CLI can be driven in-process by tests. Verbs write only to the streams in cli_context.
#pragma once

#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace baton::os {
class env;
}

namespace baton::supervisor {

// Exit codes shared by every verb.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;    // the command ran and failed (I/O, server error...)
inline constexpr int exit_invalid = 2;    // the input (a job config) is invalid
inline constexpr int exit_usage = 64;     // bad command line (sysexits EX_USAGE)
inline constexpr int exit_timeout = 124;  // `wait --timeout` gave up (as timeout(1) does)

// What a verb's callback may use; it sets exit_code before returning.
struct cli_context {
  std::ostream& out;
  std::ostream& err;
  os::env& environment;
  int exit_code = exit_ok;
  // Whether out and err are terminals: the OS's answer for std::cout and std::cerr, false for
  // the streams a test passes, so an in-process test's text never depends on where it runs.
  bool out_is_terminal = false;
  bool err_is_terminal = false;
  std::string colour_flag = "auto";  // the global --color (auto, always, never)

  // Whether to colour what goes to out (resp. err): --color, the stream, NO_COLOR
  // (terminal_style.h).
  bool colour_out() const;
  bool colour_err() const;
};

// `baton validate CONFIG`: prints the job with every default filled, or every error (exit 2).
void add_validate_command(CLI::App& app, cli_context& ctx);

inline constexpr const char* baton_app_description =
    "baton: keeps long training runs alive by sharding them across fresh workers";

// Sets up `app` as the whole baton command line (version flag, footer, every verb): run_cli's
// app, and the one tests and the man page generator walk.
void add_baton_commands(CLI::App& app, cli_context& ctx);

// Parses argv, runs the chosen verb and returns the process exit code. Bad input never throws.
int run_cli(int argc, char** argv);
int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err,
            bool out_is_terminal = false, bool err_is_terminal = false);

}  // namespace baton::supervisor
