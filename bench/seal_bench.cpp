// Seal benchmark: how fast baton hashes, seals and verifies a folder checkpoint of 200 MB
// (4 files), the cost a worker's folder checkpoint adds to a shard. Prints MB/s, medians of 5
// runs, and the CPU model; never asserts timing (shared machines are noisy). Goal: hashing at
// >= 2 GB/s, so sealing runs at disk speed. `--quick` uses 8 MB and one run, for a ctest smoke
// test.
//
//   seal_bench [--quick] [--mb N] [--runs N] [--dir PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_figures.h"
#include "os/env.h"
#include "protocol/checkpoint_folder.h"

namespace fs = std::filesystem;
using baton::os::env;
namespace protocol = baton::protocol;

namespace {

using baton::bench::cpu_model;
using baton::bench::median;

constexpr int files_per_folder = 4;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void die(const std::string& what, const baton::error& e) {
  std::fprintf(stderr, "seal_bench: %s: %s\n", what.c_str(), e.message.c_str());
  std::exit(1);
}

// Writes the folder's files afresh (dirty in the page cache, as a trainer leaves them).
void write_files(env& e, const fs::path& folder, std::size_t bytes_per_file) {
  if (auto s = e.create_dirs(folder / "sub"); !s) die("create " + folder.string(), s.error());
  std::mt19937_64 rng(42);
  std::string block(1 << 20, '\0');
  for (int i = 0; i < files_per_folder; ++i) {
    const fs::path p = folder / (i % 2 ? "sub" : ".") / ("part-" + std::to_string(i) + ".bin");
    auto f = e.new_writable_file(p);
    if (!f) die("open " + p.string(), f.error());
    for (std::size_t done = 0; done < bytes_per_file; done += block.size()) {
      for (std::size_t k = 0; k + 8 <= block.size(); k += 8) {
        const std::uint64_t v = rng();
        std::memcpy(block.data() + k, &v, 8);
      }
      const auto n = std::min(block.size(), bytes_per_file - done);
      if (auto s = (*f)->append(std::string_view(block).substr(0, n)); !s) die("write", s.error());
    }
    if (auto s = (*f)->close(); !s) die("close", s.error());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::size_t mb = 200;
  int runs = 5;
  fs::path dir = fs::temp_directory_path() / "baton-seal-bench";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--mb" && i + 1 < argc) {
      mb = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: seal_bench [--quick] [--mb N] [--runs N] [--dir PATH]\n");
      return 64;
    }
  }
  if (quick) {
    mb = 8;
    runs = 1;
  }
  env& e = env::default_env();
  (void)e.remove_dir_all(dir);
  const std::size_t per_file = (mb << 20) / files_per_folder;
  const double total_mb = static_cast<double>(per_file * files_per_folder) / (1 << 20);
  const fs::path ckpt_dir = dir / "checkpoints";
  const fs::path staging = ckpt_dir / ".staging-0" / "step-1";

  std::vector<double> hash_s, seal_s, verify_s;
  for (int run = 0; run < runs; ++run) {
    (void)e.remove_dir_all(ckpt_dir);
    write_files(e, staging, per_file);

    // Hashing alone, from the page cache: the ceiling for seal and verify.
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& f : *protocol::list_folder_files(e, staging)) {
      if (auto h = protocol::hash_file(e, staging / f.path); !h) die("hash", h.error());
    }
    hash_s.push_back(seconds_since(t0));

    // Seal: hash, fsync every file (their dirty pages go to disk here), manifest, rename.
    t0 = std::chrono::steady_clock::now();
    auto sealed = protocol::seal_checkpoint_folder(e, staging, ckpt_dir, "bench", run + 1);
    if (!sealed) die("seal", sealed.error());
    seal_s.push_back(seconds_since(t0));

    t0 = std::chrono::steady_clock::now();
    if (auto v = protocol::verify_checkpoint_folder(e, sealed->path); !v) die("verify", v.error());
    verify_s.push_back(seconds_since(t0));
  }
  (void)e.remove_dir_all(dir);

  std::printf("seal_bench: %.0f MB in %d files, median of %d run%s, CPU: %s\n", total_mb,
              files_per_folder, runs, runs == 1 ? "" : "s", cpu_model().c_str());
  const auto line = [&](const char* what, const std::vector<double>& s, const char* note) {
    const double m = median(s);
    std::printf("  %-8s %8.1f MB/s  (%.3f s)  %s\n", what, total_mb / m, m, note);
  };
  line("hash", hash_s, "xxh64 from the page cache (goal >= 2000 MB/s)");
  line("seal", seal_s, "hash + fsync of freshly written files + manifest + rename");
  line("verify", verify_s, "manifest + listing + hash (page cache)");
  return 0;
}
