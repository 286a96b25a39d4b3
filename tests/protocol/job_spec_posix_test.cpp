// check_job_files on what only POSIX file systems have here: a FIFO (a worker opening it would
// block forever) is refused naming the field, and a symlink counts as what it points at.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "os/env.h"
#include "protocol/job_spec.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

TEST_CASE("a FIFO as a data file fails, a symlink counts as what it points at",
          "[unit][job_spec]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-job-spec-posix-fifo");
  REQUIRE(::mkfifo((dir / "x.npy").c_str(), 0600) == 0);
  std::ofstream(dir / "real.npy") << "x";
  fs::create_directory(dir / "folder");
  fs::create_symlink(dir / "real.npy", dir / "y.npy");
  fs::create_symlink(dir / "folder", dir / "z.npy");
  const json doc = {{"name", "t"},
                    {"data", {{"type", "npy"}, {"features", "x.npy"}, {"labels", "y.npy"}}},
                    {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}}};
  auto spec = baton::protocol::parse_job_spec(doc.dump(), dir);
  REQUIRE(spec);
  auto& e = baton::os::env::default_env();
  auto files = baton::protocol::check_job_files(e, *spec);
  REQUIRE_FALSE(files);
  CHECK(files.error().message ==
        "data.features: expected a regular file, got a FIFO, socket or "
        "device: " +
            (dir / "x.npy").string());
  std::get<baton::protocol::npy_data>(*spec->data).features = dir / "z.npy";
  files = baton::protocol::check_job_files(e, *spec);
  REQUIRE_FALSE(files);
  CHECK(files.error().message ==
        "data.features: expected a regular file, got a folder: " + (dir / "z.npy").string());
  std::get<baton::protocol::npy_data>(*spec->data).features = dir / "real.npy";
  CHECK(baton::protocol::check_job_files(e, *spec));
  fs::remove_all(dir);
}
