// job_runner on an os::mem_env (under an os::fault_env) with fake workers: the runner's side of the
// job machine's decisions, with no process and no disk. The real-worker versions are in
// job_runner_test.cpp.
#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "os/fault_env.h"
#include "os/mem_env.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_store.h"
#include "protocol/job_spec.h"
#include "supervisor/job_log.h"
#include "supervisor/job_runner.h"
#include "support/fake_launcher.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// "/mem" on POSIX, "C:\\mem" on Windows: load_job_spec makes the job file's path absolute.
std::filesystem::path mem_root() { return baton::test::abs_path("/mem"); }

baton::protocol::job_spec spec_of(baton::os::mem_env& e) {
  const json doc = {
      {"name", "j"},
      {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 64},
        {"epochs", 2}}},
      {"shard", {{"epochs", 2}}},
      {"memory", {{"poll_ms", 10}}},
      {"worker", {{"command", {"fake-trainer"}}}}};
  REQUIRE(e.create_dirs(mem_root()));
  REQUIRE(e.put(mem_root() / "job.json", doc.dump()));
  auto spec = baton::protocol::load_job_spec(e, mem_root() / "job.json");
  REQUIRE(spec);
  return *spec;
}

bool run_to_rest(boost::asio::io_context& io, job_runner& r) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!r.at_rest() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(5ms);
  }
  return r.at_rest();
}

}  // namespace

TEST_CASE("a failed record save pauses the job with the reason, and resume finishes it",
          "[unit][job_runner]") {
  using op = baton::os::fault_env::op;
  baton::os::mem_env files;
  const auto spec = spec_of(files);
  baton::os::fault_env fe(files);
  job_store store(fe, mem_root() / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 16, "j");
  REQUIRE(created);

  baton::test::fake_launcher launcher;
  baton::test::fake_trainer trainer;
  trainer.files = &files;  // the worker's own writes do not go through the failing env
  launcher.script = trainer.script();
  // Every rename fails: the record's atomic replace, never a log append.
  fe.fail_at(1, "No space left on device", true, op::rename_file);

  boost::asio::io_context io;
  runner_options ro;
  job_runner runner(io, fe, launcher, store, *created, spec, ro);
  runner.start();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::paused);
  CHECK_THAT(runner.record().diagnosis, Catch::StartsWith("disk full: "));
  CHECK_THAT(runner.record().diagnosis, Catch::Contains("No space left on device"));
  REQUIRE(launcher.workers.size() == 1);
  CHECK(launcher.workers[0]->stop_received());  // asked to checkpoint, not killed
  CHECK_FALSE(launcher.workers[0]->killed());
  // The pause is in the job's log, written through the env.
  auto log = files.read_file(store.log_path("j"));
  REQUIRE(log);
  CHECK_THAT(*log, Catch::Contains("[baton] job paused: disk full: "));

  fe.disarm();
  runner.resume();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::completed);
  CHECK(runner.record().checkpoint_step == 16);
  auto back = store.load("j");
  REQUIRE(back);
  CHECK(back->record.state == job_state::completed);
}

TEST_CASE("a worker that breaks the protocol is killed as a protocol violation",
          "[unit][job_runner]") {
  baton::os::mem_env files;
  auto spec = spec_of(files);
  spec.restart.max_failures = 1;
  job_store store(files, mem_root() / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 16, "j");
  REQUIRE(created);
  baton::test::fake_launcher launcher;
  launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{99, p.pid(), "from the future"});
  };
  boost::asio::io_context io;
  job_runner runner(io, files, launcher, store, *created, spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::failed);
  REQUIRE(runner.record().shards.size() == 1);
  CHECK(runner.record().shards[0].cause == exit_cause::crashed);
  CHECK_THAT(runner.record().shards[0].detail, Catch::StartsWith("protocol violation: "));
  CHECK(launcher.workers[0]->killed());
}

namespace {

struct fake_job {
  baton::os::mem_env files;
  baton::protocol::job_spec spec = spec_of(files);
  job_store store{files, mem_root() / "state"};
  baton::test::fake_launcher launcher;
  boost::asio::io_context io;

  job_record create(std::int64_t total = 16) {
    REQUIRE(store.open());
    auto created = store.create(spec, total, "j");
    REQUIRE(created);
    return *created;
  }
  std::string log() {
    auto l = files.read_file(store.log_path("j"));
    return l ? *l : std::string();
  }
};

// A real baton checkpoint of `step` for job "j", written into `dir` by the fake trainer's
// own code, and its digest.
std::pair<std::filesystem::path, std::string> good_checkpoint(baton::os::env& e,
                                                              const std::filesystem::path& dir,
                                                              std::int64_t step) {
  baton::protocol::checkpoint c;
  c.metadata[baton::protocol::meta::step] = std::to_string(step);
  c.metadata[baton::protocol::meta::job] = "j";
  baton::protocol::tensor t;
  t.name = "w";
  t.shape = {1};
  t.bytes.assign(4, '\0');
  c.tensors.push_back(t);
  baton::protocol::checkpoint_store cs(e, dir, 5);
  auto saved = cs.save(c);
  REQUIRE(saved);
  auto bytes = e.read_file(saved->path);
  REQUIRE(bytes);
  auto digest = baton::protocol::checkpoint_digest(*bytes);
  REQUIRE(digest);
  return {saved->path, *digest};
}

}  // namespace

TEST_CASE("a done that claims the job complete without a checkpoint fails the job",
          "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create(16);
  j.launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "liar"});
    p.say(baton::protocol::done_msg{16, true});
    p.exit(baton::os::exit_status::exited(0));
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  CHECK_THAT(runner.record().diagnosis,
             Catch::Contains("the newest verified checkpoint is at step 0 of 16"));
  CHECK(j.launcher.workers.size() == 1);  // not retried: it would lie again
}

TEST_CASE("a checkpoint line with a string step fails the job as a protocol violation",
          "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create(16);
  j.launcher.script = [&j](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    auto [path, digest] = good_checkpoint(j.files, p.env("BATON_CHECKPOINT_DIR"), 16);
    p.say_line(R"({"type":"checkpoint","path":")" + path.generic_string() +
               R"(","step":"16","digest":")" + digest + R"("})");
    p.say(baton::protocol::done_msg{16, true});
    p.exit(baton::os::exit_status::exited(0));
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  CHECK(runner.record().diagnosis ==
        "protocol violation: checkpoint.step: expected an integer, got string");
}

TEST_CASE("a shard that ends without progress fails after max_failures, not a respawn loop",
          "[unit][job_runner]") {
  fake_job j;
  j.spec.restart.max_failures = 3;
  j.spec.restart.backoff_initial_ms = 1;
  j.spec.restart.backoff_max_ms = 1;
  auto rec = j.create(16);
  j.launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "idle"});
    p.say(baton::protocol::done_msg{0, false});
    p.exit(baton::os::exit_status::exited(0));
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  CHECK_THAT(runner.record().diagnosis,
             Catch::StartsWith("ended its shard without a new checkpoint 3 times at step 0"));
  CHECK(j.launcher.workers.size() == 3);
}

TEST_CASE("exit 2 fails the job at once with the worker's own error", "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create(16);
  j.launcher.script = [](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    p.say(baton::protocol::error_msg{"data: column 3 is not a number"});
    p.exit(baton::os::exit_status::exited(2));
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  CHECK(runner.record().diagnosis == "exit code 2: data: column 3 is not a number");
  CHECK(j.launcher.workers.size() == 1);
}

TEST_CASE("a worker's ENOSPC error pauses the job, and resume (failed too) finishes it",
          "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create();
  bool full = true;
  baton::test::fake_trainer trainer;
  trainer.files = &j.files;
  const auto train = trainer.script();
  j.launcher.script = [&](baton::test::fake_process& p) {
    if (!full) return train(p);
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    p.say(baton::protocol::error_msg{"cannot save: [Errno 28] No space left on device"});
    p.exit(baton::os::exit_status::exited(1));
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::paused);
  CHECK(runner.record().diagnosis == "disk full: cannot save: [Errno 28] No space left on device");
  full = false;
  runner.resume();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::completed);
  CHECK(runner.record().checkpoint_step == 16);
}

TEST_CASE("a rejected checkpoint is moved aside and never resumed from", "[unit][job_runner]") {
  fake_job j;
  j.spec.restart.max_failures = 2;
  j.spec.restart.backoff_initial_ms = 1;
  auto rec = j.create(16);
  const auto dir = j.store.checkpoint_dir("j");
  std::vector<std::string> resumed;
  j.launcher.script = [&](baton::test::fake_process& p) {
    resumed.push_back(p.env("BATON_RESUME_FROM"));
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    // A real checkpoint of step 8, announced with a digest it does not have.
    auto [path, digest] = good_checkpoint(j.files, dir, 8);
    p.say(baton::protocol::checkpoint_msg{path.string(), 8, "xxh64:0000000000000000"});
  };
  runner_options ro;
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, ro);
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  REQUIRE(resumed.size() == 2);
  CHECK(resumed[1].empty());  // the second worker was not pointed at the rejected file
  auto names = j.files.list_dir(dir / "rejected");
  REQUIRE(names);
  CHECK(std::count(names->begin(), names->end(), "ckpt-000000000008.safetensors") == 1);
  CHECK(std::count(names->begin(), names->end(), "ckpt-000000000008.safetensors.reason") == 1);
  auto reason = j.files.read_file(dir / "rejected" / "ckpt-000000000008.safetensors.reason");
  REQUIRE(reason);
  CHECK_THAT(*reason, Catch::Contains("the worker announced xxh64:0000000000000000"));
  CHECK_FALSE(j.files.file_exists(dir / "ckpt-000000000008.safetensors"));
  CHECK(runner.record().checkpoint_path.empty());
}

TEST_CASE("a checkpoint over the cap is rejected unread", "[unit][job_runner]") {
  fake_job j;
  j.spec.restart.max_failures = 1;
  auto rec = j.create(16);
  j.launcher.script = [&](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    auto [path, digest] = good_checkpoint(j.files, j.store.checkpoint_dir("j"), 8);
    p.say(baton::protocol::checkpoint_msg{path.string(), 8, digest});
  };
  runner_options ro;
  ro.max_checkpoint_bytes = 64;  // below the size of that file
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, ro);
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::failed);
  CHECK_THAT(runner.record().diagnosis, Catch::Contains("larger than the cap of 64 bytes"));
}

TEST_CASE("the record never points at a checkpoint the worker removed", "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create(16);
  j.spec.restart.max_failures = 1;
  const auto dir = j.store.checkpoint_dir("j");
  j.launcher.script = [&](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "pruner"});
    auto [p8, d8] = good_checkpoint(j.files, dir, 8);
    auto [p16, d16] = good_checkpoint(j.files, dir, 16);
    p.say(baton::protocol::checkpoint_msg{p8.string(), 8, d8});
    p.say(baton::protocol::checkpoint_msg{p16.string(), 16, d16});
    // Then the worker loses its newest checkpoint and still says the job is done.
    p.on_stdin = nullptr;
    boost::asio::post(p.io(), [&j, p16 = p16, self = p.shared_from_this()] {
      REQUIRE(j.files.remove_file(p16));
      self->say(baton::protocol::done_msg{16, true});
      self->exit(baton::os::exit_status::exited(0));
    });
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  // Not completed at a file that is gone: failed at the newest one that verifies.
  CHECK(runner.record().state == job_state::failed);
  CHECK(runner.record().checkpoint_step == 8);
  CHECK(runner.record().checkpoint_path == (dir / "ckpt-000000000008.safetensors").string());
  CHECK(j.files.file_exists(runner.record().checkpoint_path));
}

TEST_CASE("temp files of killed writes are swept on start and after a worker",
          "[unit][job_runner]") {
  fake_job j;
  auto rec = j.create();
  const auto dir = j.store.checkpoint_dir("j");
  REQUIRE(j.files.create_dirs(dir));
  REQUIRE(j.files.put(dir / "ckpt-000000000004.safetensors.tmp-1-1", "half"));
  baton::test::fake_trainer trainer;
  trainer.files = &j.files;
  const auto train = trainer.script();
  int workers = 0;
  j.launcher.script = [&](baton::test::fake_process& p) {
    ++workers;
    CHECK_FALSE(j.files.file_exists(dir / "ckpt-000000000004.safetensors.tmp-1-1"));
    if (workers == 1) {
      // Killed in the middle of a write: its temp file stays behind.
      REQUIRE(j.files.put(dir / "ckpt-000000000009.safetensors.tmp-2-2", "half"));
      p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
      p.exit(baton::os::exit_status::signaled(9));
      return;
    }
    CHECK_FALSE(j.files.file_exists(dir / "ckpt-000000000009.safetensors.tmp-2-2"));
    train(p);
  };
  j.spec.restart.backoff_initial_ms = 1;
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  CHECK(runner.record().state == job_state::completed);
  CHECK(workers == 2);
}

namespace {

// An env whose untrusted reads block until released: a read stuck in the kernel.
class stuck_env : public baton::os::fault_env {
 public:
  using baton::os::fault_env::fault_env;
  std::atomic<bool> release{false};
  std::atomic<int> inside{0};
  baton::result<std::unique_ptr<baton::os::readable_file>> new_untrusted_readable_file(
      const std::filesystem::path& path, const baton::os::untrusted_file_limits& limits) override {
    ++inside;
    if (path.filename().string().find("ckpt-000000000008") != std::string::npos) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto f = baton::os::fault_env::new_untrusted_readable_file(path, limits);
    --inside;
    return f;
  }
};

}  // namespace

TEST_CASE("a checkpoint read that hangs never blocks the io thread and ends at the deadline",
          "[unit][job_runner]") {
  fake_job j;
  j.spec.restart.max_failures = 1;
  auto rec = j.create(16);
  stuck_env stuck(j.files);
  j.launcher.script = [&](baton::test::fake_process& p) {
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    auto [path, digest] = good_checkpoint(j.files, j.store.checkpoint_dir("j"), 8);
    p.say(baton::protocol::checkpoint_msg{path.string(), 8, digest});
    p.say(baton::protocol::done_msg{8, false});
  };
  runner_options ro;
  ro.verify_deadline = std::chrono::milliseconds(300);
  job_runner runner(j.io, stuck, j.launcher, j.store, rec, j.spec, ro);
  runner.start();
  // The io thread keeps serving timers while the read hangs.
  int ticks = 0;
  boost::asio::steady_timer tick(j.io);
  std::function<void()> arm = [&] {
    tick.expires_after(std::chrono::milliseconds(20));
    tick.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      ++ticks;
      if (!runner.at_rest()) arm();
    });
  };
  arm();
  const bool rested = run_to_rest(j.io, runner);
  stuck.release = true;
  // The abandoned read finishes on its own thread; let it before its env goes away.
  while (stuck.inside.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(rested);
  CHECK(ticks >= 5);
  CHECK(runner.record().state == job_state::failed);
  CHECK_THAT(runner.record().diagnosis, Catch::Contains("timed out after 300 ms"));
}

TEST_CASE("a crash before any checkpoint says so and where the worker's output is",
          "[unit][job_runner]") {
  // `baton run` with a wrong script path once printed only "crashed (exit code 2), checkpoint at
  // step 0": there was no checkpoint, and the Python error was in a log it never named.
  fake_job j;
  j.spec.restart.max_failures = 1;
  auto rec = j.create(16);
  j.launcher.script = [&](baton::test::fake_process& p) {
    p.say_line("Traceback (most recent call last): no such file");
    p.exit(baton::os::exit_status::exited(1));
  };
  std::vector<std::string> events;
  runner_options ro;
  ro.on_event = [&](const std::string& m) { events.push_back(m); };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, ro);
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  const auto ended = std::find_if(events.begin(), events.end(), [](const std::string& m) {
    return m.find(" ended: crashed") != std::string::npos;
  });
  REQUIRE(ended != events.end());
  CHECK_THAT(*ended,
             Catch::Contains(", no checkpoint yet; its output: " + j.store.log_path("j").string()));
  CHECK_THAT(*ended, !Catch::Contains("checkpoint at step"));
}

TEST_CASE("a worker's stderr reaches the job log stamped, and its last line names the crash",
          "[unit][job_runner]") {
  fake_job j;
  j.spec.restart.max_failures = 1;
  auto rec = j.create(16);
  j.launcher.script = [&](baton::test::fake_process& p) {
    p.say_stderr("Traceback (most recent call last):\n  File \"train.py\"\nValue");
    p.say_line("some text on stdout");
    p.say_stderr("Error: the unfinished line waits for its end");  // no newline: its exit ends it
    p.exit(baton::os::exit_status::exited(1));
  };
  std::vector<std::string> events;
  runner_options ro;
  ro.on_event = [&](const std::string& m) { events.push_back(m); };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, ro);
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  const auto log = j.log();
  INFO(log);
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < log.size();) {
    const auto nl = log.find('\n', at);
    REQUIRE(nl != std::string::npos);  // whole lines only
    lines.push_back(log.substr(at, nl - at));
    at = nl + 1;
  }
  std::vector<std::string> texts;
  for (const auto& l : lines) {
    CHECK(starts_with_log_stamp(l));
    texts.push_back(l.substr(log_stamp_bytes));
  }
  const auto has = [&](const std::string& t) {
    return std::find(texts.begin(), texts.end(), t) != texts.end();
  };
  CHECK(has("Traceback (most recent call last):"));
  CHECK(has("  File \"train.py\""));
  CHECK(has("some text on stdout"));
  CHECK(has("ValueError: the unfinished line waits for its end"));
  // The crash is diagnosed from the worker's last line, read after its exit.
  CHECK_THAT(runner.record().diagnosis, Catch::Contains("ValueError: the unfinished line"));
}

TEST_CASE("a checkpoint replaced after its verification is still caught before the next spawn",
          "[unit][job_runner]") {
  // The runner trusts the checkpoint it verified on the worker's message from a stat alone, as
  // long as it is provably the same file. Here it is not: once verified, the worker puts a
  // damaged copy under the same name and ends. The next spawn must not resume from it.
  fake_job j;
  auto rec = j.create(16);
  const auto dir = j.store.checkpoint_dir("j");
  std::vector<std::string> resumed;
  const job_runner* watched = nullptr;
  std::function<void()> poll;  // the first worker's wait for the verification
  j.launcher.script = [&](baton::test::fake_process& p) {
    resumed.push_back(p.env("BATON_RESUME_FROM"));
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    if (resumed.size() > 1) {
      auto [path, digest] = good_checkpoint(j.files, dir, 16);
      p.say(baton::protocol::checkpoint_msg{path.string(), 16, digest});
      p.say(baton::protocol::done_msg{16, true});
      p.exit(baton::os::exit_status::exited(0));
      return;
    }
    auto [path, digest] = good_checkpoint(j.files, dir, 8);
    p.say(baton::protocol::checkpoint_msg{path.string(), 8, digest});
    auto timer = std::make_shared<boost::asio::steady_timer>(p.io());
    poll = [&, timer, path = path, self = p.shared_from_this()] {
      if (watched->record().checkpoint_step < 8) {  // not verified yet
        timer->expires_after(1ms);
        timer->async_wait([&](const boost::system::error_code&) { poll(); });
        return;
      }
      auto bytes = j.files.read_file(path);
      REQUIRE(bytes);
      bytes->back() ^= 1;
      REQUIRE(j.files.put(path, *bytes));
      self->say(baton::protocol::done_msg{8, false});
      self->exit(baton::os::exit_status::exited(0));
    };
    boost::asio::post(p.io(), [&] { poll(); });
  };
  job_runner runner(j.io, j.files, j.launcher, j.store, rec, j.spec, runner_options{});
  watched = &runner;
  runner.start();
  REQUIRE(run_to_rest(j.io, runner));
  REQUIRE(resumed.size() == 2);
  CHECK(resumed[0].empty());
  CHECK(resumed[1].empty());  // not pointed at the damaged step-8 file: a fresh start
  auto names = j.files.list_dir(dir / "rejected");
  REQUIRE(names);
  CHECK(std::count(names->begin(), names->end(), "ckpt-000000000008.safetensors") == 1);
  CHECK_THAT(j.log(), Catch::Contains("skipped checkpoint") && Catch::Contains("digest mismatch"));
  CHECK(runner.record().state == job_state::completed);
}

TEST_CASE("an unchanged verified checkpoint is resumed from without a second read",
          "[unit][job_runner]") {
  // The same two shards with the file left alone: the second worker resumes from it, and the
  // walk before its spawn opened no checkpoint (only the verification on the message did).
  struct counting_env : baton::os::mem_env {
    std::atomic<int> untrusted_opens{0};  // of checkpoint files (the job log is read so too)
    baton::result<std::unique_ptr<baton::os::readable_file>> new_untrusted_readable_file(
        const std::filesystem::path& path,
        const baton::os::untrusted_file_limits& limits) override {
      if (path.extension() == ".safetensors") ++untrusted_opens;
      return mem_env::new_untrusted_readable_file(path, limits);
    }
  };
  counting_env files;
  const auto spec = spec_of(files);
  job_store store(files, mem_root() / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 16, "j");
  REQUIRE(created);
  const auto dir = store.checkpoint_dir("j");
  baton::test::fake_launcher launcher;
  std::vector<std::string> resumed;
  std::vector<int> opens_at_spawn;
  launcher.script = [&](baton::test::fake_process& p) {
    resumed.push_back(p.env("BATON_RESUME_FROM"));
    opens_at_spawn.push_back(files.untrusted_opens.load());
    p.say(baton::protocol::hello_msg{1, p.pid(), "w"});
    const std::int64_t step = resumed.size() == 1 ? 8 : 16;
    auto [path, digest] = good_checkpoint(files, dir, step);
    p.say(baton::protocol::checkpoint_msg{path.string(), step, digest});
    p.say(baton::protocol::done_msg{step, step == 16});
    p.exit(baton::os::exit_status::exited(0));
  };
  boost::asio::io_context io;
  job_runner runner(io, files, launcher, store, *created, spec, runner_options{});
  runner.start();
  REQUIRE(run_to_rest(io, runner));
  CHECK(runner.record().state == job_state::completed);
  REQUIRE(resumed.size() == 2);
  CHECK(std::filesystem::path(resumed[1]).filename() == "ckpt-000000000008.safetensors");
  REQUIRE(opens_at_spawn.size() == 2);
  CHECK(opens_at_spawn[1] - opens_at_spawn[0] == 1);  // the message's verification only
}
