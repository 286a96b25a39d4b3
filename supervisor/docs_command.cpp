#include "supervisor/docs_command.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>

#include "cli_docs/cli_docs.h"
#include "protocol/version.h"

namespace baton::supervisor {

std::string baton_man_page(const CLI::App& app) {
  cli_docs::man_info info;
  // No commit and no date: the page stays byte-identical across rebuilds of one version.
  info.version = "baton " + std::string(protocol::version());
  info.manual = "baton manual";
  info.description =
      "baton splits each training run into short shards and runs every shard in a fresh "
      "worker process (baton-worker, or a Python trainer) that resumes from the last "
      "checkpoint, recycling a worker that outgrows its memory budget. `baton run` runs one job "
      "in the foreground; `baton serve` is the daemon (systemd's baton.service, or the per-user "
      "unit), and the other commands talk to it over its control socket.";
  info.footer = app.get_footer();
  info.see_also = {"baton-worker(1)", "systemctl(1)"};
  return cli_docs::man_page(app, info);
}

std::string baton_bash_completion(const CLI::App& app) {
  return cli_docs::bash_completion(app, job_id_positionals, job_id_command);
}

std::string baton_zsh_completion(const CLI::App& app) {
  return cli_docs::zsh_completion(app, job_id_positionals, job_id_command);
}

void add_docs_command(CLI::App& app, cli_context& ctx) {
  auto* cmd = app.add_subcommand("__generate", "Print baton(1) or a shell completion (build use)");
  cmd->group("");  // hidden
  auto what = std::make_shared<std::string>();
  cmd->add_option("WHAT", *what, "man, bash or zsh")
      ->required()
      ->check(CLI::IsMember({"man", "bash", "zsh"}));
  cmd->callback([&app, &ctx, what] {
    if (*what == "man") {
      ctx.out << baton_man_page(app);
    } else if (*what == "bash") {
      ctx.out << baton_bash_completion(app);
    } else {
      ctx.out << baton_zsh_completion(app);
    }
    ctx.exit_code = exit_ok;
  });
}

}  // namespace baton::supervisor
