// Thin entry point: everything lives in baton_supervisor_lib so tests can drive it in-process.
#include <cstdio>
#include <exception>

#include "supervisor/cli.h"

int main(int argc, char** argv) {
  // The one place exceptions stop: report and fail rather than abort with a core dump.
  try {
    return baton::supervisor::run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "baton: unknown exception\n");
  }
  return baton::supervisor::exit_failure;
}
