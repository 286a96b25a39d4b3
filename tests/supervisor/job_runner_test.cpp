// job_runner against a state directory that stops accepting writes: a record save that fails
// must park the job in `paused` with the reason (not crash it, not run on blind), and resume()
// must finish it once the disk is back. Real worker processes (the built-in baton-worker, so the
// test runs on Windows too; the Python trainer has its own integration test), an in-process
// io_context, a os::fault_env under the job store.
#include "supervisor/job_runner.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "os/fault_env.h"
#include "os/mem_env.h"
#include "protocol/checkpoint_store.h"
#include "supervisor/job_log_writer.h"
#include "support/fake_launcher.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-job-runner-test-" + name);
}

// The Python example's small job (two shards of three epochs), run by the built-in worker.
baton::protocol::job_spec small_job(const fs::path& dir) {
  const fs::path example = fs::path(BATON_SOURCE_DIR) / "configs/examples/python-worker";
  std::ifstream in(example / "job.json");
  auto job = nlohmann::json::parse(in);
  job["worker"]["command"] = nullptr;     // runner_options::worker_exe
  job["debug"]["leak_mib_per_step"] = 0;  // this test is about the disk, not memory
  const auto path = dir / "job.json";
  std::ofstream(path) << job.dump(2);
  auto spec = baton::protocol::load_job_spec(baton::os::env::default_env(), path);
  REQUIRE(spec);
  return *spec;
}

// Runs the io_context until the runner rests or `limit` passes.
bool run_real_to_rest(boost::asio::io_context& io, job_runner& r,
                      std::chrono::seconds limit = 120s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!r.at_rest() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(20ms);
  }
  return r.at_rest();
}

}  // namespace

TEST_CASE("a job whose record cannot be saved pauses with the reason and resumes later",
          "[integration][job_runner]") {
  using op = baton::os::fault_env::op;
  const auto dir = scratch("disk-full");
  const auto spec = small_job(dir);
  baton::os::fault_env fe(baton::os::env::default_env());
  job_store store(fe, dir / "state");
  REQUIRE(store.open());
  const auto geometry = baton::protocol::compute_geometry(
      spec, std::get<baton::protocol::synthetic_data>(*spec.data).samples);
  auto created = store.create(spec, geometry.total_steps, spec.name);
  REQUIRE(created);

  const char* message = GENERATE("No space left on device", "Input/output error");
  CAPTURE(message);
  fe.fail_at(1, message, true, op::append);

  boost::asio::io_context io;
  std::vector<std::string> events;
  runner_options ro;
  ro.worker_exe = BATON_WORKER_EXE;
  ro.on_event = [&](const std::string& m) { events.push_back(m); };
  job_runner runner(io, fe, os_process_launcher(), store, *created, spec, ro);
  runner.start();
  REQUIRE(run_real_to_rest(io, runner));
  INFO([&] {
    std::string all;
    for (const auto& e : events) all += e + "\n";
    return all;
  }());
  CHECK(fe.faults_fired() >= 1);
  CHECK(runner.record().state == job_state::paused);
  CHECK(runner.runtime().phase == worker_phase::none);
  CHECK_THAT(runner.record().diagnosis, Catch::Contains(message));
  CHECK(runner.record().checkpoint_step < geometry.total_steps);

  // Space is back: resume finishes the job and the store holds the completed record.
  fe.disarm();
  runner.resume();
  REQUIRE(run_real_to_rest(io, runner));
  CHECK(runner.record().state == job_state::completed);
  CHECK(runner.record().checkpoint_step == geometry.total_steps);
  auto back = store.load(spec.name);
  REQUIRE(back);
  CHECK(back->record.state == job_state::completed);
  CHECK(back->record.checkpoint_step == geometry.total_steps);
  baton::protocol::checkpoint_store ckpts(baton::os::env::default_env(),
                                          store.checkpoint_dir(spec.name), 1);
  auto newest = ckpts.load_newest();
  REQUIRE(newest);
  REQUIRE(newest->has_value());
  CHECK((*newest)->data.step() == geometry.total_steps);
  fs::remove_all(dir);
}

TEST_CASE("a worker's invocation: argv, environment and the Windows memory backstop",
          "[unit][job_runner]") {
  const auto dir = scratch("invocation");
  auto spec = small_job(dir);
  job_store store(baton::os::env::default_env(), dir / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 36, spec.name);
  REQUIRE(created);
  created->checkpoint_step = 12;

  spec.memory.hard_limit_mib = 400;
  spec.worker.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  auto inv = make_worker_invocation(spec, store, *created, "/opt/baton/baton-worker", 5);
  REQUIRE(inv.argv.size() == 5);
  CHECK(inv.argv[0] == "/opt/baton/baton-worker");
  CHECK(inv.argv[1] == "--job");
  CHECK(inv.argv[2] == store.spec_path(spec.name).string());
  CHECK(inv.argv[4] == store.checkpoint_dir(spec.name).string());
  CHECK(inv.working_dir == store.job_dir(spec.name));
  const std::map<std::string, std::string> env(inv.env.begin(), inv.env.end());
  CHECK(env.at("BATON_START_STEP") == "12");
  CHECK(env.at("BATON_MAX_STEPS") == "5");
  CHECK(env.at("BATON_JOB_ID") == spec.name);
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "1");  // the job's worker.env
  CHECK(env.at("BATON_STAGING_DIR") == (store.checkpoint_dir(spec.name) / ".staging-0").string());
  CHECK(env.count("BATON_RESUME_FROM") == 0);  // a fresh start: no checkpoint to resume from
  // The hard limit plus a quarter: sampling kills at the limit, the Job Object only catches what
  // outruns the sampler.
  REQUIRE(inv.memory_backstop_bytes);
  CHECK(*inv.memory_backstop_bytes == 500ull << 20);

  spec.memory.hard_limit_mib.reset();
  created->checkpoint_path = (store.checkpoint_dir(spec.name) / "ckpt-000000000012").string();
  created->shards.resize(3);
  inv = make_worker_invocation(spec, store, *created, "/opt/baton/baton-worker");
  const std::map<std::string, std::string> env2(inv.env.begin(), inv.env.end());
  CHECK(env2.at("BATON_RESUME_FROM") == created->checkpoint_path);
  CHECK(env2.at("BATON_STAGING_DIR") == (store.checkpoint_dir(spec.name) / ".staging-3").string());
  CHECK_FALSE(inv.memory_backstop_bytes);
  CHECK(std::none_of(inv.env.begin(), inv.env.end(),
                     [](const auto& kv) { return kv.first == "BATON_MAX_STEPS"; }));
  fs::remove_all(dir);
}

TEST_CASE("a worker's environment: its user's login first, then BATON_*, then the job's own",
          "[integration][job_runner]") {
  const auto dir = scratch("login-env");
  auto spec = small_job(dir);
  spec.worker.env = {{"PATH", "/job/bin"}};  // the job's word is the last
  job_store store(baton::os::env::default_env(), dir / "state");
  REQUIRE(store.open());
  auto created = store.create(spec, 10, spec.name);
  REQUIRE(created);
  boost::asio::io_context io;
  baton::test::fake_launcher launcher;
  runner_options ro;
  ro.worker_exe = "/nonexistent/baton-worker";  // never started: the launcher is a fake
  ro.login_env = {{"HOME", "/home/a"}, {"PATH", "/home/a/bin:/usr/bin"}};
  {
    job_runner runner(io, baton::os::env::default_env(), launcher, store, *created, spec, ro);
    runner.start();
    for (int i = 0; i < 100 && launcher.workers.empty(); ++i) io.run_for(10ms);
    REQUIRE(launcher.workers.size() == 1);
    const auto& env = launcher.workers[0]->options().env;
    const auto first = [&](const std::string& k) {
      return std::find_if(env.begin(), env.end(), [&](const auto& e) { return e.first == k; });
    };
    const auto last_path =
        std::find_if(env.rbegin(), env.rend(), [](const auto& e) { return e.first == "PATH"; });
    REQUIRE(last_path != env.rend());
    CHECK(last_path->second == "/job/bin");  // os::spawn: later entries win
    REQUIRE(first("HOME") != env.end());
    CHECK(first("HOME")->second == "/home/a");
    CHECK(first("PATH")->second == "/home/a/bin:/usr/bin");
    CHECK(first("HOME") < first("BATON_JOB_ID"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a folder announcement must name a real folder directly in the staging folder",
          "[unit][job_runner]") {
  baton::os::mem_env e;
  const fs::path staging = baton::test::abs_path("/s/jobs/a/checkpoints/.staging-2");
  REQUIRE(e.create_dirs(staging / "step-9"));
  REQUIRE(e.put(staging / "plain", "x"));
  CHECK(check_folder_announcement(e, staging, (staging / "step-9").string(), 9, 8));
  CHECK(check_folder_announcement(e, staging, (staging / "x" / ".." / "step-9").string(), 9, 8));
  const auto why = [&](const std::string& path, std::int64_t step) {
    auto s = check_folder_announcement(e, staging, path, step, 8);
    REQUIRE_FALSE(s);
    return s.error().message;
  };
  CHECK(why("step-9", 9) == "not an absolute path");
  CHECK_THAT(why(baton::test::abs_path("/s/jobs/a/checkpoints/step-9").string(), 9),
             Catch::StartsWith("not a folder directly inside the staging folder"));
  CHECK_THAT(why((staging / "step-9" / "inner").string(), 9),
             Catch::StartsWith("not a folder directly inside"));
  CHECK_THAT(why((staging / ".hidden").string(), 9), Catch::Contains("is not 1-64 characters"));
  CHECK_THAT(why((staging / std::string(65, 'a')).string(), 9),
             Catch::Contains("is not 1-64 characters"));
  CHECK(why((staging / "step-9").string(), 8) ==
        "step 8 does not advance past the newest verified checkpoint (step 8)");
  CHECK_THAT(why((staging / "missing").string(), 9), Catch::EndsWith("missing: does not exist"));
  CHECK_THAT(why((staging / "plain").string(), 9), Catch::Contains("a file, not a folder"));
}

TEST_CASE("a runner sweeps staging leftovers at start and gives each worker a fresh one",
          "[integration][job_runner]") {
  const auto dir = scratch("staging-sweep");
  const auto spec = small_job(dir);
  job_store store(baton::os::env::default_env(), dir / "state");
  REQUIRE(store.open());
  const auto geometry = baton::protocol::compute_geometry(
      spec, std::get<baton::protocol::synthetic_data>(*spec.data).samples);
  auto created = store.create(spec, geometry.total_steps, spec.name);
  REQUIRE(created);
  const auto ckpt = store.checkpoint_dir(spec.name);
  fs::create_directories(ckpt / ".staging-9" / "step-3");
  std::ofstream(ckpt / ".staging-9" / "step-3" / "half-written") << "x";

  boost::asio::io_context io;
  std::vector<std::string> events;
  runner_options ro;
  ro.worker_exe = BATON_WORKER_EXE;
  ro.on_event = [&](const std::string& m) { events.push_back(m); };
  job_runner runner(io, baton::os::env::default_env(), os_process_launcher(), store, *created, spec,
                    ro);
  runner.start();
  CHECK_FALSE(fs::exists(ckpt / ".staging-9"));
  REQUIRE(run_real_to_rest(io, runner));
  CHECK(runner.record().state == job_state::completed);
  for (const auto& e : fs::directory_iterator(ckpt)) {
    CHECK(e.path().filename().string().rfind(".staging-", 0) == std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("a worker's last log lines leave out baton's own and come oldest first",
          "[unit][job_runner]") {
  baton::os::mem_env e;
  const fs::path dir = baton::test::abs_path("/s/jobs/a");
  REQUIRE(e.create_dirs(dir));
  const auto log = dir / "worker.log";
  {
    job_log_writer w(e, log);
    for (const char* line : {"one", "two", "[baton] worker 7 started at step 0", "three", "four",
                             "five", "six", "[baton] worker 7 ended: crashed (exit code 2)"}) {
      REQUIRE(w.add_line(line));
    }
  }
  CHECK(worker_log_tail_lines(e, log, dir, 5) ==
        std::vector<std::string>{"two", "three", "four", "five", "six"});
  CHECK(worker_log_tail_lines(e, log, dir, 2) == std::vector<std::string>{"five", "six"});
  CHECK(worker_log_tail(e, log, dir) == "six");
  CHECK(worker_log_tail_lines(e, log, dir, 0).empty());
  // Only a log inside the job's folder is read.
  CHECK(worker_log_tail_lines(e, log, baton::test::abs_path("/s/jobs/b"), 5).empty());
  CHECK(worker_log_tail_lines(e, dir / "none.log", dir, 5).empty());
}

TEST_CASE("a checkpoint changed on disk after its save still fails the supervisor's check",
          "[unit]") {
  // The worker announces the digest of the bytes it wrote, without reading the file back; a
  // disk (here a fault_env) that changes one byte behind its back is caught on the supervisor's
  // side, which reads the file itself.
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  const fs::path dir = baton::test::abs_path("/jobs/a/checkpoints");  // absolute on Windows too
  baton::protocol::checkpoint c;
  c.metadata[baton::protocol::meta::job] = "a";
  c.metadata[baton::protocol::meta::step] = "7";
  c.tensors.push_back({"w", baton::protocol::dtype::f32, {2}, std::string(8, '\1')});
  baton::protocol::checkpoint_store cs(e, dir, 2);
  auto good = cs.save(c);
  REQUIRE(good);
  CHECK(verify_reported_checkpoint(mem, dir, good->path.string(), 7, good->digest, 1 << 20));

  c.metadata[baton::protocol::meta::step] = "8";
  e.call_at(
      1,
      [&](baton::os::fault_env::op, const fs::path& from) {
        auto bytes = mem.read_file(from);
        REQUIRE(bytes);
        (*bytes)[bytes->size() - 3] ^= 0x40;
        REQUIRE(mem.put(from, *bytes));
      },
      baton::os::fault_env::op::rename_file);
  auto bad = cs.save(c);
  REQUIRE(bad);
  auto s = verify_reported_checkpoint(mem, dir, bad->path.string(), 8, bad->digest, 1 << 20);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("digest mismatch"));
}
