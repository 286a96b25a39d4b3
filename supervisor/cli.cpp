#include "supervisor/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "os/env.h"
#include "os/system.h"
#include "protocol/field_checker.h"
#include "protocol/job_spec.h"
#include "protocol/version.h"
#include "supervisor/checkpoint_command.h"
#include "supervisor/client_command.h"
#include "supervisor/docs_command.h"
#include "supervisor/run_command.h"
#include "supervisor/serve_command.h"
#include "supervisor/service_command.h"
#include "supervisor/terminal_style.h"

namespace baton::supervisor {

namespace {

// Prefixes each line so multi-line error reports stay greppable by file.
void print_lines(std::ostream& os, const std::string& prefix, const std::string& text) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) os << prefix << line << '\n';
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

// git's "did you mean": a word CLI11 did not take, against the names it would have taken there.
std::string unknown_word_text(std::string_view word, const std::vector<std::string>& names,
                              std::string_view what) {
  std::vector<std::string_view> views(names.begin(), names.end());
  std::string text = "baton: '" + std::string(word) + "' is not " + std::string(what);
  if (const auto near = protocol::closest(word, views)) {
    text += "; did you mean '" + std::string(*near) + "'?";
  } else {
    text += "; expected one of " + protocol::one_of(views);
  }
  return text + "\n";
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  // Not the hidden ones (empty group, e.g. __generate): a typo should not be told about them.
  for (const auto* sub :
       app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
  }
  // The top-level flags (--color) are taken after a subcommand too (fallthrough).
  if (const auto* parent = app.get_parent()) {
    for (const auto& n : flag_names(*parent)) names.push_back(n);
  }
  return names;
}

// For an "arguments not expected" error: the first unknown word, with a suggestion from the
// deepest subcommand that was given (its flags, or its own subcommands for a word).
std::optional<std::string> did_you_mean(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return std::nullopt;
    if (const auto* sub = [&]() -> const CLI::App* {
          for (const auto* s : at->get_subcommands([](const CLI::App*) { return true; })) {
            if (s->get_name() == word) return s;
          }
          return nullptr;
        }()) {
      at = sub;
      continue;
    }
    if (word.rfind("--", 0) == 0) {
      const std::string name = word.substr(0, word.find('='));
      const auto flags = flag_names(*at);
      if (std::find(flags.begin(), flags.end(), name) == flags.end()) {
        return unknown_word_text(name, flags, "an option of `" + at->get_name() + "`");
      }
    } else if (at == &app) {
      return unknown_word_text(word, subcommand_names(app), "a baton command");
    }
  }
  return std::nullopt;
}

bool colour_for(const std::string& flag, bool is_terminal) {
  const auto choice = parse_colour_choice(flag);
  return use_colour(choice ? *choice : colour_choice::automatic, is_terminal,
                    os::get_env("NO_COLOR"));
}

}  // namespace

bool cli_context::colour_out() const { return colour_for(colour_flag, out_is_terminal); }
bool cli_context::colour_err() const { return colour_for(colour_flag, err_is_terminal); }

void add_validate_command(CLI::App& app, cli_context& ctx) {
  auto* cmd = app.add_subcommand(
      "validate",
      "Check a job config: print it with every default filled in (exit 0) or list every "
      "problem on stderr (exit 2)");
  // shared_ptr: the callback outlives this function and must own the parsed value's storage.
  auto config = std::make_shared<std::string>();
  cmd->add_option("CONFIG", *config, "Job config file (JSON)")->required();
  cmd->callback([&ctx, config] {
    auto spec = protocol::load_job_spec(ctx.environment, *config);
    if (!spec) {
      print_lines(ctx.err, "", spec.error().message);  // already prefixed with the file
      ctx.exit_code = exit_invalid;
      return;
    }
    if (auto files = protocol::check_job_files(ctx.environment, *spec); !files) {
      print_lines(ctx.err, *config + ": ", files.error().message);
      ctx.exit_code = exit_invalid;
      return;
    }
    // What validates must also fit this machine: `baton run` and `baton submit` check the same.
    if (auto fits = protocol::check_job_limits(*spec, protocol::this_machine()); !fits) {
      print_lines(ctx.err, *config + ": ", fits.error().message);
      ctx.exit_code = exit_invalid;
      return;
    }
    ctx.out << protocol::to_json(*spec).dump(2) << '\n';
    ctx.exit_code = exit_ok;
  });
}

void add_baton_commands(CLI::App& app, cli_context& ctx) {
  app.set_version_flag("--version", "baton " + std::string(protocol::version()) + " (commit " +
                                        std::string(protocol::build_commit()) + ")");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 failure, 2 invalid job config, 64 bad command line, 124 `wait "
      "--timeout` ran out.\n");
  // CLI11 defaults to reading "/name" as an option on Windows, so a path argument such as
  // "/jobs/a.json" would be rejected there; baton's options are "--name" on every platform.
  // Set before the subcommands are added: each copies it from its parent when created.
  app.allow_windows_style_options(false);
  // Top-level flags (--color) may come after the verb too: `baton status ID --color=never`.
  app.fallthrough();
  app.add_option("--color", ctx.colour_flag,
                 "Colour state names and errors: auto (on a terminal, unless NO_COLOR is set "
                 "and not empty), always (even with NO_COLOR), never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->default_str("auto");
  add_validate_command(app, ctx);
  add_run_command(app, ctx);
  add_serve_command(app, ctx);
  add_submit_command(app, ctx);
  add_list_command(app, ctx);
  add_status_command(app, ctx);
  add_logs_command(app, ctx);
  add_cancel_command(app, ctx);
  add_resume_command(app, ctx);
  add_wait_command(app, ctx);
  add_rm_command(app, ctx);
  add_prune_command(app, ctx);
  add_dashboard_command(app, ctx);
  add_service_command(app, ctx);
  add_checkpoint_command(app, ctx);
  add_docs_command(app, ctx);  // last: it documents every command above
}

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err, bool out_is_terminal,
            bool err_is_terminal) {
  CLI::App app(baton_app_description, "baton");
  cli_context ctx{out, err, os::env::default_env()};
  ctx.out_is_terminal = out_is_terminal;
  ctx.err_is_terminal = err_is_terminal;
  add_baton_commands(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A typo gets a suggestion rather than CLI11's "A subcommand is required" or "The following
    // arguments were not expected".
    if (e.get_exit_code() != 0) {
      if (auto hint = did_you_mean(app, argc, argv)) {
        err << *hint << "Run 'baton --help' for the commands and their options.\n";
        return exit_usage;
      }
    }
    // --help and --version arrive here as "errors" with a success code.
    const int code = app.exit(e, out, err);
    return code == 0 ? exit_ok : exit_usage;
  }
  return ctx.exit_code;
}

int run_cli(int argc, char** argv) {
  return run_cli(argc, argv, std::cout, std::cerr, os::stdout_is_terminal(),
                 os::stderr_is_terminal());
}

}  // namespace baton::supervisor
