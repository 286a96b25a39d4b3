#include "supervisor/checkpoint_command.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "os/env.h"
#include "protocol/checkpoint_folder.h"
#include "protocol/checkpoint_store.h"
#include "support/cli_run.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;

using baton::test::baton_cli;

TEST_CASE("checkpoint verify says OK for a good folder or file and names the damage otherwise",
          "[unit][cli]") {
  auto& e = baton::os::env::default_env();
  const auto dir = baton::test::fresh_scratch_dir("baton-cli-checkpoint-verify");
  const auto staged = dir / ".staging-0" / "step-7";
  fs::create_directories(staged / "sub");
  std::ofstream(staged / "sub" / "model.pt") << "weights";
  auto sealed = baton::protocol::seal_checkpoint_folder(e, staged, dir, "j", 7);
  REQUIRE(sealed);
  const std::string folder = sealed->path.string();

  auto r = baton_cli({"checkpoint", "verify", folder});
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.out == "OK " + folder + ": step 7\n");

  baton::protocol::checkpoint c;
  c.metadata[baton::protocol::meta::job] = "j";
  c.metadata[baton::protocol::meta::step] = "5";
  c.metadata[baton::protocol::meta::epoch] = "0";
  c.tensors.push_back({"w", baton::protocol::dtype::f32, {1}, std::string(4, '\0')});
  baton::protocol::checkpoint_store store(e, dir, 5);
  auto file = store.save(c);
  REQUIRE(file);
  r = baton_cli({"checkpoint", "verify", file->path.string()});
  CHECK(r.code == baton::supervisor::exit_ok);
  CHECK(r.out == "OK " + file->path.string() + ": step 5\n");

  std::ofstream(sealed->path / "sub" / "model.pt") << "weightz";
  r = baton_cli({"checkpoint", "verify", folder});
  CHECK(r.code == baton::supervisor::exit_failure);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("FAILED " + (sealed->path / "sub" / "model.pt").string() +
                                      ": content hashes to xxh64"));

  std::ofstream(file->path, std::ios::app) << "tail";
  r = baton_cli({"checkpoint", "verify", file->path.string()});
  CHECK(r.code == baton::supervisor::exit_failure);
  CHECK_THAT(r.err, Catch::StartsWith("FAILED " + file->path.string() + ": "));

  CHECK(baton_cli({"checkpoint", "verify"}).code == baton::supervisor::exit_usage);
  CHECK(baton_cli({"checkpoint"}).code == baton::supervisor::exit_usage);
  fs::remove_all(dir);
}
