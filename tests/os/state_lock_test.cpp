// The state directory's lock file on the real file system: one holder at a time (a second
// attempt, even from this process, is refused naming the holder's pid and role), released when
// the holder lets go or dies, and never handed to a child process.
#include "os/state_lock.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "os/process.h"
#include "os/system.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using namespace baton::os;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace state_lock_test {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("the holder line round-trips and a partial one reads as unknown", "[unit][state_lock]") {
  const lock_holder h{4242, "baton serve"};
  CHECK(format_lock_holder(h) == "4242 baton serve\n");
  auto back = parse_lock_holder(format_lock_holder(h));
  REQUIRE(back);
  CHECK(back->pid == 4242);
  CHECK(back->role == "baton serve");
  CHECK_FALSE(parse_lock_holder(""));
  CHECK_FALSE(parse_lock_holder("4242 baton se"));  // no newline: still being written
  CHECK_FALSE(parse_lock_holder("-1 x\n"));
  CHECK_FALSE(parse_lock_holder("12a x\n"));
}

TEST_CASE("a second lock on one state directory is refused, naming the holder",
          "[unit][state_lock]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-state-lock-second");
  auto first = os_state_locker().lock(dir, "baton serve");
  REQUIRE(first);
  CHECK((*first)->path() == dir / state_lock_file_name);
  CHECK(read_text(dir / state_lock_file_name) == std::to_string(current_pid()) + " baton serve\n");

  auto second = os_state_locker().lock(dir, "baton run");
  REQUIRE_FALSE(second);
  CHECK(second.error().held_by_other);
  REQUIRE(second.error().holder);
  CHECK(second.error().holder->pid == current_pid());
  CHECK(second.error().holder->role == "baton serve");
  CHECK_THAT(
      second.error().why.message,
      Catch::Contains("state directory " + dir.string() + " is in use by `baton serve` (pid " +
                      std::to_string(current_pid()) + "; lock file"));
  // The refused attempt must not have disturbed the holder's record.
  CHECK(read_text(dir / state_lock_file_name) == std::to_string(current_pid()) + " baton serve\n");

  first->reset();  // released: the next one gets it
  auto third = os_state_locker().lock(dir, "baton run");
  REQUIRE(third);
  CHECK(read_text(dir / state_lock_file_name) == std::to_string(current_pid()) + " baton run\n");
}

TEST_CASE("a state directory that does not exist is an error, not a refusal",
          "[unit][state_lock]") {
  const auto dir = baton::test::fresh_scratch_dir("baton-state-lock-missing") / "nope";
  auto l = os_state_locker().lock(dir, "baton serve");
  REQUIRE_FALSE(l);
  CHECK_FALSE(l.error().held_by_other);
  CHECK_THAT(l.error().why.message, Catch::Contains("cannot lock state directory"));
}

TEST_CASE("a child process never inherits the lock", "[unit][state_lock]") {
  // A worker that outlived its daemon must not keep the state directory locked.
  const auto dir = baton::test::fresh_scratch_dir("baton-state-lock-child");
  auto held = os_state_locker().lock(dir, "baton serve");
  REQUIRE(held);
  boost::asio::io_context io;
  spawn_options o;
  o.argv = {BATON_TEST_CHILD_EXE, "print", "ready", "sleep", "5000"};
  auto child = spawn(io, o);
  REQUIRE(child);
  bool ready = false;
  (*child)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (!ec && line == "ready") {
      ready = true;
      io.stop();
    }
  });
  io.run_for(std::chrono::seconds(10));
  REQUIRE(ready);
  held->reset();
  auto again = os_state_locker().lock(dir, "baton run");
  CHECK(again);
  CHECK((*child)->signal_group(group_signal::kill));
}

}  // namespace state_lock_test
