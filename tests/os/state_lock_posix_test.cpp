// POSIX only: a holder that died while a child it forked still had the lock's descriptor (the
// window between fork and exec, where O_CLOEXEC has not acted yet).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "os/state_lock.h"
#include "support/test_paths.h"

using namespace baton::os;

TEST_CASE("a dead holder's child that still has the lock is waited for, not a refusal",
          "[unit][state_lock]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-state-lock-orphan");
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    auto held = os_state_locker().lock(dir, "baton serve");
    if (!held) ::_exit(1);
    if (::fork() == 0) {  // a child that never execs: it holds the description for 400 ms
      ::usleep(400 * 1000);
      ::_exit(0);
    }
    ::_exit(0);  // the holder dies with its lock still held by that child
  }
  int st = 0;
  REQUIRE(::waitpid(holder, &st, 0) == holder);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto again = os_state_locker().lock(dir, "baton serve");
  const auto waited = std::chrono::steady_clock::now() - t0;
  INFO((again ? std::string() : again.error().why.message));
  CHECK(again);
  CHECK(waited < std::chrono::seconds(5));
}
