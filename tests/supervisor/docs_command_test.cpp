// `baton __generate`: the man page and completions of baton's own command line name every
// visible command and long flag (walked from the same app run_cli parses), the command prints
// exactly what the functions return, and it stays hidden from users.
#include "supervisor/docs_command.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "cli_docs/cli_docs.h"
#include "os/env.h"
#include "supervisor/cli.h"

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// roff writes '-' in names as "\-".
std::string roff_name(std::string s) {
  std::string out;
  for (const char c : s) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

int run(std::vector<std::string> args, std::string& out, std::string& err) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream o, e;
  const int code = baton::supervisor::run_cli(static_cast<int>(argv.size()), argv.data(), o, e);
  out = o.str();
  err = e.str();
  return code;
}

}  // namespace

TEST_CASE("baton's man page and completions name every command and long flag", "[unit][docs]") {
  std::ostringstream out, err;
  baton::supervisor::cli_context ctx{out, err, baton::os::env::default_env()};
  CLI::App app(baton::supervisor::baton_app_description, "baton");
  baton::supervisor::add_baton_commands(app, ctx);
  const auto page = baton::supervisor::baton_man_page(app);
  const auto bash = baton::supervisor::baton_bash_completion(app);
  const auto zsh = baton::supervisor::baton_zsh_completion(app);
  const auto cmds = baton::cli_docs::visible_commands(app);
  REQUIRE(cmds.size() > 10);
  for (const auto& c : cmds) {
    INFO("command: baton " << c.path);
    if (!c.path.empty()) {
      CHECK(contains(page, ".SS \"baton " + roff_name(c.path) + "\""));
      CHECK(contains(bash, "cmd_path='" + c.path + "'"));
      CHECK(contains(zsh, "cmd_path='" + c.path + "'"));
    }
    for (const auto& f : c.long_flags) {
      INFO("flag: " << f);
      CHECK(contains(page, "\\fB" + roff_name(f) + "\\fR"));
      CHECK(contains(bash, f));
      CHECK(contains(zsh, "'" + f + ":"));
    }
  }
  // The verbs users type most, by name: a walk that found nothing would pass the loop above.
  for (const char* verb : {"run", "submit", "status", "logs", "rm", "prune", "resume"}) {
    CHECK(contains(bash, std::string("'/") + verb + "') cmd_path="));
  }
  // Job ids come from the daemon, for every command whose positional is an ID.
  CHECK(contains(bash, "'status') subs='' flags='"));
  CHECK(contains(bash, "baton list --json"));
  CHECK_FALSE(contains(page, "__generate"));
  CHECK_FALSE(contains(bash, "__generate"));
}

TEST_CASE("baton __generate prints the page and the scripts, and is hidden", "[unit][docs]") {
  std::string out, err;
  REQUIRE(run({"baton", "__generate", "man"}, out, err) == baton::supervisor::exit_ok);
  CHECK(out.rfind(".\\\" Generated from baton", 0) == 0);
  CHECK(contains(out, ".SH COMMANDS"));
  REQUIRE(run({"baton", "__generate", "bash"}, out, err) == baton::supervisor::exit_ok);
  CHECK(contains(out, "complete -F _baton baton"));
  REQUIRE(run({"baton", "__generate", "zsh"}, out, err) == baton::supervisor::exit_ok);
  CHECK(out.rfind("#compdef baton\n", 0) == 0);
  CHECK(run({"baton", "__generate", "fish"}, out, err) == baton::supervisor::exit_usage);
  REQUIRE(run({"baton", "--help"}, out, err) == baton::supervisor::exit_ok);
  CHECK_FALSE(contains(out, "__generate"));
}
