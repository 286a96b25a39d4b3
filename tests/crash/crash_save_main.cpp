// Crash-point helper for tests/integration/crash_points_test.cpp: performs exactly one save
// through a os::fault_env over the real env and calls std::abort() right after the Nth mutating
// operation (N = 0: before the first). If the save has fewer than N operations it finishes and
// exits 0. A real abort, not a thrown exception, so nothing in the writer can clean up.
//
//   crash_save checkpoint <dir> <keep> <step> <N>
//   crash_save record <state_dir> <job_id> <N> <intended_record_out>
//
// `record` writes the record it is about to save (fingerprint) to <intended_record_out> before
// it dies or exits, because save() stamps the time and generation the test cannot predict.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "crash/crash_fixtures.h"
#include "os/env.h"
#include "os/fault_env.h"
#include "protocol/checkpoint_store.h"
#include "supervisor/job_store.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: crash_save checkpoint <dir> <keep> <step> <N>\n"
               "       crash_save record <state_dir> <job_id> <N> <intended_record_out>\n");
  return 2;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    std::fprintf(stderr, "crash_save: cannot write %s\n", path.c_str());
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  baton::os::fault_env fe(baton::os::env::default_env());
  std::int64_t n = 0;

  // Arms the abort: the callback runs before operation N+1, i.e. right after operation N.
  const auto arm = [&](std::function<void()> before_abort) {
    fe.call_at(n + 1, [before_abort](baton::os::fault_env::op, const std::filesystem::path&) {
      before_abort();
      std::abort();
    });
  };

  if (mode == "checkpoint" && argc == 6) {
    n = std::stoll(argv[5]);
    arm([] {});
    baton::protocol::checkpoint_store store(fe, argv[2], std::stoi(argv[3]));
    auto r = store.save(baton::crash::checkpoint_at(std::stoll(argv[4])));
    if (fe.op_count() == n) std::abort();  // right after the last operation
    if (!r) {
      std::fprintf(stderr, "crash_save: %s\n", r.error().message.c_str());
      return 1;
    }
    return 0;
  }
  if (mode == "record" && argc == 6) {
    n = std::stoll(argv[4]);
    const std::string id = argv[3];
    const std::string out = argv[5];
    baton::supervisor::job_store store(fe, argv[2]);
    auto loaded = store.load(id);
    if (!loaded) {
      std::fprintf(stderr, "crash_save: %s\n", loaded.error().message.c_str());
      return 1;
    }
    baton::supervisor::job_record rec = loaded->record;
    baton::crash::advance_record(rec);
    // save() has bumped seq and stamped the time before its first operation.
    arm([&rec, out] { write_text(out, baton::crash::fingerprint(rec)); });
    auto s = store.save(rec);
    if (s) write_text(out, baton::crash::fingerprint(rec));
    if (fe.op_count() == n) std::abort();
    if (!s) {
      std::fprintf(stderr, "crash_save: %s\n", s.error().message.c_str());
      return 1;
    }
    return 0;
  }
  return usage();
}
