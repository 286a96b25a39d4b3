// The man pages and completions the build generated (build/docs, cmake/packaging.cmake), as the
// .deb installs them: they name every command and long flag of the CLI as this test binary
// walks it (so a flag added without regenerating fails here), baton's equal what baton prints
// now, the bash script completes in a real bash, the zsh script parses, and man renders both
// pages without a warning.
#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_docs/cli_docs.h"
#include "os/env.h"
#include "supervisor/cli.h"
#include "supervisor/docs_command.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using baton::os::exit_status;
using baton::test::run_process;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace cli_docs_files_test {

const fs::path docs_dir = BATON_DOCS_DIR;

using baton::test::read_text;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool have(const std::string& tool) {
  return fs::exists("/usr/bin/" + tool) || fs::exists("/bin/" + tool);
}

std::string gunzip(const fs::path& p) {
  REQUIRE(fs::exists(p));
  auto r = run_process({"gzip", "-dc", p.string()});
  REQUIRE(r.status == exit_status::exited(0));
  return r.out;
}

std::string roff_name(const std::string& s) {
  std::string out;
  for (const char c : s) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

struct baton_app {
  std::ostringstream out, err;
  baton::supervisor::cli_context ctx{out, err, baton::os::env::default_env()};
  CLI::App app{baton::supervisor::baton_app_description, "baton"};
  baton_app() { baton::supervisor::add_baton_commands(app, ctx); }
};

// Runs `script` in bash with the generated completion sourced; stdout is what it echoes.
baton::test::process_output bash_with_completion(const std::string& script,
                                                 const fs::path& stderr_log) {
  REQUIRE(have("bash"));  // the package's users have it; a missing bash fails, never skips
  const auto completion = docs_dir / "baton.bash";
  REQUIRE(fs::exists(completion));
  return run_process({"bash", "--norc", "--noprofile", "-c",
                      "source '" + completion.string() + "' || exit 9\n" + script},
                     {}, stderr_log);
}

TEST_CASE("generated man page and completions name every command and long flag",
          "[integration][docs]") {
  baton_app b;
  const auto page = gunzip(docs_dir / "baton.1.gz");
  const auto bash = read_text(docs_dir / "baton.bash");
  const auto zsh = read_text(docs_dir / "_baton");
  const auto cmds = baton::cli_docs::visible_commands(b.app);
  REQUIRE(cmds.size() > 10);
  for (const auto& c : cmds) {
    INFO("baton " << c.path);
    if (!c.path.empty()) {
      CHECK(contains(page, ".SS \"baton " + roff_name(c.path) + "\""));
      CHECK(contains(bash, "cmd_path='" + c.path + "'"));
      CHECK(contains(zsh, "cmd_path='" + c.path + "'"));
    }
    for (const auto& f : c.long_flags) {
      INFO(f);
      CHECK(contains(page, "\\fB" + roff_name(f) + "\\fR"));
      CHECK(contains(bash, " " + f));
      CHECK(contains(zsh, "'" + f + ":"));
    }
  }
  // Byte for byte what this build's CLI generates: the files are regenerated, never stale.
  CHECK(page == baton::supervisor::baton_man_page(b.app));
  CHECK(bash == baton::supervisor::baton_bash_completion(b.app));
  CHECK(zsh == baton::supervisor::baton_zsh_completion(b.app));
}

TEST_CASE("baton-worker(1) documents every flag of baton-worker --help", "[integration][docs]") {
  const auto page = gunzip(docs_dir / "baton-worker.1.gz");
  auto help = run_process({BATON_WORKER_EXE, "--help"});
  REQUIRE(help.status == exit_status::exited(0));
  std::istringstream words(help.out);
  std::string w;
  int flags = 0;
  while (words >> w) {
    if (w.rfind("--", 0) != 0 || w.size() < 3) continue;
    w = w.substr(0, w.find_first_of(",=["));
    INFO(w);
    CHECK(contains(page, "\\fB" + roff_name(w) + "\\fR"));
    ++flags;
  }
  CHECK(flags >= 4);  // --help --job --checkpoint-dir --threads --max-steps
  CHECK_FALSE(contains(page, "generate"));
}

TEST_CASE("the bash completion completes commands, flags and job ids", "[integration][docs]") {
  const auto dir = fs::temp_directory_path() / "baton-completion-test";
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  const auto log = dir / "bash.stderr";
  auto r = bash_with_completion(
      "complete -p baton\n"
      "COMP_WORDS=(baton st); COMP_CWORD=1; _baton; echo \"st:${COMPREPLY[*]}\"\n"
      "COMP_WORDS=(baton run --); COMP_CWORD=2; _baton; echo \"run:${COMPREPLY[*]}\"\n"
      "COMP_WORDS=(baton service ''); COMP_CWORD=2; _baton; echo \"service:${COMPREPLY[*]}\"\n"
      // The word after a flag that takes a value is that value, not the positional.
      "COMP_WORDS=(baton status --socket /x --j); COMP_CWORD=4; _baton; "
      "echo \"status:${COMPREPLY[*]}\"\n",
      log);
  INFO("stdout:\n" << r.out << "stderr:\n" << read_text(log));
  REQUIRE(r.status == exit_status::exited(0));
  CHECK(contains(r.out, "complete -F _baton baton\n"));
  CHECK(contains(r.out, "\nst:status\n"));
  // Every long flag of run, whatever its order (the CLI decides it, and it grows).
  const auto run_at = r.out.find("\nrun:");
  REQUIRE(run_at != std::string::npos);
  const auto run_line = r.out.substr(run_at + 5, r.out.find('\n', run_at + 1) - run_at - 5) + " ";
  for (const char* f : {"--help ", "--state-dir ", "--worker ", "--json ", "--fresh ", "--set "}) {
    CHECK(contains(" " + run_line, std::string(" ") + f));
  }
  CHECK_FALSE(contains(run_line, "-h "));  // only what starts with "--"
  CHECK(contains(r.out, "\nservice:install reload uninstall\n"));
  CHECK(contains(r.out, "\nstatus:--json\n"));
  CHECK(read_text(log).empty());

  // Job ids: from `baton list --json` as the daemon formats it (dump(2)); a stand-in baton on
  // PATH prints that document, shards' own ids included, which must not be offered.
  const nlohmann::json list = {
      {"jobs",
       {{{"id", "20261201-aaaa"}, {"state", "running"}, {"shards", {{{"id", "shard-1"}}}}},
        {{"id", "20261201-bbbb"}, {"state", "completed"}}}}};
  std::ofstream(dir / "list.json") << list.dump(2) << "\n";
  const auto fake = dir / "bin" / "baton";
  std::ofstream(fake) << "#!/bin/sh\n[ \"$1 $2\" = \"list --json\" ] && exec cat '"
                      << (dir / "list.json").string() << "'\nexit 1\n";
  fs::permissions(fake, fs::perms::owner_all);
  const auto ids_log = dir / "ids.stderr";
  auto ids = bash_with_completion(
      "PATH='" + (dir / "bin").string() + ":'\"$PATH\"\n" +
          "COMP_WORDS=(baton logs 20261201-); COMP_CWORD=2; _baton; echo \"ids:${COMPREPLY[*]}\"\n"
          "COMP_WORDS=(baton rm -f ''); COMP_CWORD=3; _baton; echo \"rm:${COMPREPLY[*]}\"\n",
      ids_log);
  INFO("stdout:\n" << ids.out << "stderr:\n" << read_text(ids_log));
  CHECK(contains(ids.out, "ids:20261201-aaaa 20261201-bbbb\n"));
  CHECK(contains(ids.out, "rm:20261201-aaaa 20261201-bbbb\n"));
  CHECK(read_text(ids_log).empty());

  // No daemon: the real baton fails to connect, and completion stays silent (no error text).
  const auto quiet_log = dir / "quiet.stderr";
  auto quiet = bash_with_completion(
      "export BATON_SOCKET='" + (dir / "none.sock").string() + "'\n" + "PATH='" +
          fs::path(BATON_EXE).parent_path().string() + ":'\"$PATH\"\n" +
          "COMP_WORDS=(baton status ''); COMP_CWORD=2; _baton; echo \"none:${#COMPREPLY[@]}\"\n",
      quiet_log);
  INFO("stdout:\n" << quiet.out << "stderr:\n" << read_text(quiet_log));
  CHECK(quiet.out == "none:0\n");
  CHECK(read_text(quiet_log).empty());
  fs::remove_all(dir);
}

TEST_CASE("the zsh completion parses and hands zsh commands, flags and job ids",
          "[integration][docs]") {
  // zsh comes with scripts/setup.sh: missing, this fails rather than passes untested.
  REQUIRE(have("zsh"));
  const auto file = docs_dir / "_baton";
  REQUIRE(fs::exists(file));
  const auto log = fs::temp_directory_path() / "baton-zsh-n.stderr";
  auto r = run_process({"zsh", "-n", file.string()}, {}, log);
  INFO(read_text(log));
  CHECK(r.status == exit_status::exited(0));
  CHECK(read_text(log).empty());
  // The check can fail: a broken copy does not parse.
  const auto broken = fs::temp_directory_path() / "baton-zsh-broken";
  std::ofstream(broken) << read_text(file) << "\ncase $x in\n";
  auto rb = run_process({"zsh", "-n", broken.string()}, {}, log);
  CHECK(rb.status != exit_status::exited(0));
  fs::remove(broken);

  // Completing for real needs zsh's line editor; stand-ins for _describe, compadd and _files
  // print what the script hands them, which is the script's whole job.
  const auto dir = fs::temp_directory_path() / "baton-zsh-completion";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto fake = dir / "baton";
  std::ofstream(fake) << "#!/bin/sh\n[ \"$1 $2\" = \"list --json\" ] && printf '%s\\n' "
                      << "'{' '  \"jobs\": [' '    {' '      \"id\": \"job-a\"' '    }' ']}'\n";
  fs::permissions(fake, fs::perms::owner_all);
  const auto log2 = dir / "zsh.stderr";
  auto r2 =
      run_process({"zsh", "-f", "-c",
                   "_describe() { shift 3; print -r -- \"describe: ${(j:|:)${(@P)1}}\"; }\n"
                   "compadd() { [[ $1 == -a ]] && print -r -- \"compadd: ${(j: :)${(@P)2}}\"; }\n"
                   "_files() { print files; }\n"
                   "source '" +
                       file.string() +
                       "' >/dev/null\n"
                       "PATH='" +
                       dir.string() +
                       ":'\"$PATH\"\n"
                       "words=(baton st); CURRENT=2; _baton\n"
                       "words=(baton run --); CURRENT=3; _baton\n"
                       "words=(baton run --state-dir ''); CURRENT=4; _baton\n"
                       "words=(baton status ''); CURRENT=3; _baton\n"},
                  {}, log2);
  INFO("stdout:\n" << r2.out << "stderr:\n" << read_text(log2));
  CHECK(r2.status == exit_status::exited(0));
  CHECK(contains(r2.out, "describe: validate:"));
  CHECK(contains(r2.out, "|status:Show a job"));
  CHECK(contains(r2.out, "|--fresh:Discard"));
  CHECK(contains(r2.out, "\nfiles\n"));  // the value of --state-dir
  CHECK(contains(r2.out, "compadd: job-a\n"));
  CHECK(read_text(log2).empty());
  fs::remove_all(dir);
  fs::remove(log);
}

TEST_CASE("man renders both pages without a warning", "[integration][docs]") {
  REQUIRE(have("man"));  // man-db, from scripts/setup.sh (lintian needs it too)
  for (const char* name : {"baton.1.gz", "baton-worker.1.gz"}) {
    INFO(name);
    const auto log = fs::temp_directory_path() / "baton-man.stderr";
    auto r = run_process({"man", "--warnings", "-E", "UTF-8", "-l", (docs_dir / name).string()},
                         {{"MANWIDTH", "80"}, {"PAGER", "cat"}}, log);
    // Bold and underline come as overstrike ("N\bN"): keep the last character of each.
    std::string text;
    for (const char c : r.out) {
      if (c == '\b') {
        if (!text.empty()) text.pop_back();
      } else {
        text += c;
      }
    }
    INFO("stderr:\n" << read_text(log) << "stdout:\n" << text);
    CHECK(r.status == exit_status::exited(0));
    CHECK(read_text(log).empty());
    CHECK(contains(text, "\nNAME\n"));
    CHECK(contains(text, "\nSYNOPSIS\n"));
    CHECK(contains(text, std::string(name) == "baton.1.gz" ? "baton run [OPTIONS] config"
                                                           : "baton-worker [OPTIONS]"));
  }
}

}  // namespace cli_docs_files_test
