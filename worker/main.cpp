// baton-worker: the default worker. Everything lives in worker_main.cpp so tests can link it.
#include <cstdio>
#include <exception>

#include "worker/worker_main.h"

int main(int argc, char** argv) {
  try {
    return baton::worker::run_worker(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-worker: fatal: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "baton-worker: fatal: unknown exception\n");
  }
  return baton::worker::exit_runtime_error;
}
