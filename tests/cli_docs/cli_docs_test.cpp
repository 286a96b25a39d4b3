// cli_docs on a small made-up app: what each generator takes from the CLI11 definition (nested
// subcommands, flags with and without values, positionals), what it leaves out (hidden ones)
// and how it quotes text for roff and the shells.
#include "cli_docs/cli_docs.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <string>

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct sample_app {
  CLI::App app{"tool: does things", "tool"};
  std::string id, file, socket;
  bool json = false;
  sample_app() {
    auto* show = app.add_subcommand("show", "Show a thing");
    show->add_option("ID", id, "Thing id")->required();
    show->add_flag("--json", json, "Print JSON");
    show->add_option("-s,--socket", socket, "Socket path");
    auto* group = app.add_subcommand("group", "Grouped 'commands'");
    auto* load = group->add_subcommand("load", ".starts with a dot and has a \\ backslash");
    load->add_option("FILE", file, "It's a file");
    auto* hidden = app.add_subcommand("__secret", "Not for users");
    hidden->group("");
    hidden->add_flag("--hidden-flag", json, "Nope");
    show->add_flag("--internal", json, "Hidden flag")->group("");
  }
};

}  // namespace

TEST_CASE("visible_commands walks nested subcommands and skips hidden ones", "[unit][cli_docs]") {
  sample_app s;
  const auto cmds = baton::cli_docs::visible_commands(s.app);
  REQUIRE(cmds.size() == 4);
  CHECK(cmds[0].path.empty());
  CHECK(cmds[1].path == "show");
  CHECK(cmds[1].long_flags == std::vector<std::string>{"--help", "--json", "--socket"});
  CHECK(cmds[2].path == "group");
  CHECK(cmds[3].path == "group load");
}

TEST_CASE("man_page has every command, flag and positional, roff-escaped", "[unit][cli_docs]") {
  sample_app s;
  baton::cli_docs::man_info info;
  info.version = "tool 1.2";
  info.footer = "Exit codes: 0 ok.";
  info.see_also = {"other(1)"};
  const auto page = baton::cli_docs::man_page(s.app, info);
  CHECK(contains(page, ".TH TOOL 1 \"\" \"tool 1.2\""));
  CHECK(contains(page, ".SH NAME\ntool \\- does things\n"));
  CHECK(contains(page, ".SS \"tool show\""));
  CHECK(contains(page, ".SS \"tool group load\""));
  CHECK(contains(page, "\\fB\\-s\\fR, \\fB\\-\\-socket\\fR \\fITEXT\\fR"));
  CHECK(contains(page, "\\fB\\-\\-json\\fR\nPrint JSON"));
  CHECK(contains(page, "\\fBtool show\\fR [\\fIOPTIONS\\fR] \\fIID\\fR"));
  CHECK(contains(page, "[\\fIFILE\\fR]"));  // optional positional
  // A description line starting with '.' would be a roff request; a backslash an escape.
  CHECK(contains(page, "\n\\&.starts with a dot and has a \\e backslash"));
  CHECK(contains(page, ".SH \"EXIT STATUS\"\nExit codes: 0 ok."));
  CHECK(contains(page, "\\fBother\\fR(1)"));
  CHECK_FALSE(contains(page, "__secret"));
  CHECK_FALSE(contains(page, "internal"));
}

TEST_CASE("bash_completion knows each command's flags, valued flags and positional kind",
          "[unit][cli_docs]") {
  sample_app s;
  const auto script = baton::cli_docs::bash_completion(s.app, {"ID"}, "tool ids");
  CHECK(contains(script, "_tool_ids() { { tool ids; } 2>/dev/null; }"));
  CHECK(contains(script, "'/show') cmd_path='show' ;;"));
  CHECK(contains(script, "'group/load') cmd_path='group load' ;;"));
  // The word after --socket is its value, not a positional.
  CHECK(contains(script, "'show/-s'|'show/--socket') skip=1 ;;"));
  CHECK(contains(script, "'show') subs='' flags='-h --help --json -s --socket' pos='id' ;;"));
  CHECK(contains(script, "'group') subs='load' flags='-h --help' pos='' ;;"));
  CHECK(contains(script, "'group load') subs='' flags='-h --help' pos='file' ;;"));
  CHECK(contains(script, "complete -F _tool tool\n"));
  CHECK_FALSE(contains(script, "__secret"));
  CHECK_FALSE(contains(script, "--internal"));
}

TEST_CASE("zsh_completion describes commands and flags and quotes single quotes",
          "[unit][cli_docs]") {
  sample_app s;
  const auto script = baton::cli_docs::zsh_completion(s.app, {"ID"}, "tool ids");
  CHECK(script.rfind("#compdef tool\n", 0) == 0);
  CHECK(contains(script, "'show:Show a thing'"));
  CHECK(contains(script, "'--json:Print JSON'"));
  CHECK(contains(script, R"('group:Grouped '\''commands'\''')"));
  CHECK_FALSE(contains(script, "FILE"));  // positionals are completed, not offered
  CHECK(contains(script, "('show/-s'|'show/--socket') skip=1 ;;"));
  // zsh's `path` is PATH's array: the script must not make it local.
  CHECK_FALSE(contains(script, "local path"));
  CHECK_FALSE(contains(script, "__secret"));
  CHECK(contains(script, "_tool \"$@\"\n"));
}
