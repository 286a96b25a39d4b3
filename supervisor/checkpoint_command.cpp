#include "supervisor/checkpoint_command.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>
#include <string>

#include "os/env.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_folder.h"

namespace baton::supervisor {

namespace {

// Step of a verified file or folder; the error names the file and the reason.
result<std::int64_t> verify_any(os::env& e, const std::string& path) {
  auto info = e.stat_no_follow(path);
  if (!info) return info.error();
  if (info->kind == os::entry_kind::directory) {
    auto m = protocol::verify_checkpoint_folder(e, path);
    if (!m) return m.error();
    return m->step;
  }
  if (info->kind != os::entry_kind::regular) {
    return make_error(path + ": " +
                      (info->kind == os::entry_kind::missing
                           ? std::string("does not exist")
                           : std::string("not a file or a folder")));
  }
  auto file = e.new_readable_file(path);
  if (!file) return file.error();
  auto sum = protocol::checkpoint_summary_streamed(
      [&](std::uint64_t offset, std::size_t n, std::string& out) {
        return (*file)->read(offset, n, out);
      },
      (*file)->size(), path, protocol::folder_hash_chunk_bytes);
  if (!sum) return sum.error();
  return sum->step;
}

}  // namespace

void add_checkpoint_command(CLI::App& app, cli_context& ctx) {
  auto* cmd = app.add_subcommand("checkpoint", "Inspect checkpoints");
  cmd->require_subcommand(1);
  auto* verify = cmd->add_subcommand(
      "verify",
      "Check a checkpoint file or a sealed checkpoint folder: print OK and its step (exit 0) or "
      "the file and the reason it is damaged (exit 1)");
  auto path = std::make_shared<std::string>();
  verify->add_option("PATH", *path, "ckpt-<step>.safetensors file or ckpt-<step>/ folder")
      ->required();
  verify->callback([&ctx, path] {
    auto step = verify_any(ctx.environment, *path);
    if (!step) {
      ctx.err << "FAILED " << step.error().message << '\n';
      ctx.exit_code = exit_failure;
      return;
    }
    ctx.out << "OK " << *path << ": step " << *step << '\n';
    ctx.exit_code = exit_ok;
  });
}

}  // namespace baton::supervisor
