// Real baton-worker processes, driven the way the supervisor drives them: a job run in one go
// must end with the same weights and optimizer state, bit for bit, as the same job run as shards
// that are SIGKILLed, SIGTERMed and asked to stop on stdin at random moments. Also checks the
// protocol output, the exit codes and the fault injection the supervisor's tests rely on.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "os/env.h"
#include "os/process.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_store.h"
#include "protocol/messages.h"

namespace fs = std::filesystem;
using baton::os::exit_status;
using namespace std::chrono_literals;
namespace protocol = baton::protocol;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace worker_resume_test {

fs::path fresh_dir(const std::string& name) {
  static std::mt19937_64 gen(std::random_device{}());
  const fs::path d = fs::temp_directory_path() /
                     ("baton-worker-test-" + name + "-" + std::to_string(gen() % 1000000000));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// 256 x 10 synthetic rows, 512-512-1, batch 16, 3 epochs: 48 steps, wide enough that a step
// takes longer than the test's reaction time, so stops land at many different steps.
std::string job_json(const std::string& shard, const std::string& extra = "",
                     const std::string& validation_split = "0.0") {
  return R"({"name": "resume", "data": {"type": "synthetic", "samples": 256, "features": 10,
    "seed": 4}, "model": {"layers": [{"units": 512, "activation": "relu"},
    {"units": 512, "activation": "relu"}, {"units": 1, "activation": "sigmoid"}]},
    "training": {"batch_size": 16, "epochs": 3, "seed": 9, "validation_split": )" +
         validation_split + R"(}, "shard": )" + shard + extra + "}";
}

fs::path write_job(const fs::path& dir, const std::string& json) {
  const fs::path p = dir / "job.json";
  std::ofstream(p) << json;
  return p;
}

// resume, stop_before_turn, terminate_before_turn: for a worker started ahead (BATON_START_AHEAD),
// `delay` after its hello.
enum class action {
  none,
  kill,
  terminate,
  stop,
  stop_at_start,
  resume,
  stop_before_turn,
  terminate_before_turn
};

// One worker process as the supervisor sees it.
struct run_result {
  std::vector<protocol::worker_message> messages;
  exit_status status;
  // From spawning: the first progress (training about to start) and the last message.
  std::chrono::microseconds first_progress{0}, last_message{0};
  std::chrono::microseconds acted_at{0};  // when `act` was carried out; 0: never
};

template <class Pred>
bool run_until(boost::asio::io_context& io, Pred done, std::chrono::milliseconds limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(5ms);
  }
  return done();
}

// Runs baton-worker on `job`; `act` is applied `delay` after the first progress message, which
// the worker sends just before its first step (kill: `delay` after spawning).
run_result run_worker(const fs::path& job, const fs::path& ckpt, action act = action::none,
                      std::chrono::microseconds delay = 0us) {
  const bool ahead = act == action::resume || act == action::stop_before_turn ||
                     act == action::terminate_before_turn;
  boost::asio::io_context io;
  baton::os::spawn_options o;
  o.argv = {BATON_WORKER_EXE, "--job",     job.string(), "--checkpoint-dir",
            ckpt.string(),    "--threads", "1"};
  if (ahead) o.env.emplace_back("BATON_START_AHEAD", "1");
  o.stderr_log = ckpt.parent_path() / "worker.log";
  auto spawned = baton::os::spawn(io, o);
  REQUIRE(spawned);
  auto& p = **spawned;
  run_result r;
  bool read_done = false, exited = false, acted = false;
  const auto started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point act_at = started + delay;
  bool armed = act == action::kill;
  if (act == action::stop_at_start) {
    // Waits in the pipe until the worker's stdin reader starts, right after hello.
    p.async_write_line(protocol::encode(protocol::stop_msg{}),
                       [](const boost::system::error_code&) {});
  }
  p.async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (ec) {
      read_done = true;
      return;
    }
    auto m = protocol::decode_worker_message(line);
    CHECK(m);  // every line is a protocol message
    if (!m) return;
    if (r.messages.empty()) {
      CHECK(std::holds_alternative<protocol::hello_msg>(*m));  // hello first
      if (ahead) {
        armed = true;
        act_at = std::chrono::steady_clock::now() + delay;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    r.last_message = std::chrono::duration_cast<std::chrono::microseconds>(now - started);
    // The first progress comes just before the first step: stops are timed from there.
    if (std::holds_alternative<protocol::progress_msg>(*m) && r.first_progress.count() == 0) {
      r.first_progress = r.last_message;
      if (act == action::stop || act == action::terminate) {
        armed = true;
        act_at = now + delay;
      }
    }
    r.messages.push_back(std::move(*m));
  });
  p.async_wait([&](const boost::system::error_code& ec, exit_status st) {
    CHECK_FALSE(ec);
    r.status = st;
    exited = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!(exited && read_done) && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(200us);
    if (armed && !acted && !exited && std::chrono::steady_clock::now() >= act_at) {
      acted = true;
      r.acted_at = std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - started);
      switch (act) {
        case action::kill:
          REQUIRE(p.signal_group(baton::os::group_signal::kill));
          break;
        case action::terminate:
          REQUIRE(p.signal_group(baton::os::group_signal::terminate));
          break;
        case action::stop:
        case action::stop_before_turn:
          p.async_write_line(protocol::encode(protocol::stop_msg{}),
                             [](const boost::system::error_code&) {});
          break;
        case action::terminate_before_turn:
          REQUIRE(p.signal_group(baton::os::group_signal::terminate));
          break;
        case action::resume:
          p.async_write_line(protocol::encode(protocol::resume_msg{}),
                             [](const boost::system::error_code&) {});
          break;
        case action::none:
        case action::stop_at_start:
          break;
      }
    }
  }
  REQUIRE(exited);
  REQUIRE(read_done);
  return r;
}

template <class T>
const T* last_of(const run_result& r) {
  for (auto it = r.messages.rbegin(); it != r.messages.rend(); ++it) {
    if (const T* m = std::get_if<T>(&*it)) return m;
  }
  return nullptr;
}

// A clean end: ... checkpoint, done as the last two lines, matching steps.
void check_clean_end(const run_result& r, const fs::path& ckpt_dir) {
  REQUIRE(r.messages.size() >= 3);
  const auto* ck = std::get_if<protocol::checkpoint_msg>(&r.messages[r.messages.size() - 2]);
  const auto* done = std::get_if<protocol::done_msg>(&r.messages.back());
  REQUIRE(ck);
  REQUIRE(done);
  CHECK(ck->step == done->step);
  CHECK(fs::path(ck->path).parent_path() == fs::absolute(ckpt_dir).lexically_normal());
  auto bytes = baton::os::env::default_env().read_file(ck->path);
  REQUIRE(bytes);
  auto digest = protocol::checkpoint_digest(*bytes);
  REQUIRE(digest);
  CHECK(*digest == ck->digest);
}

// Tensor name -> bytes of the newest checkpoint in `dir`.
std::map<std::string, std::string> final_tensors(const fs::path& dir) {
  protocol::checkpoint_store store(baton::os::env::default_env(), dir, 2);
  auto loaded = store.load_newest();
  REQUIRE(loaded);
  REQUIRE(*loaded);
  CHECK((*loaded)->rejected.empty());
  std::map<std::string, std::string> out;
  for (const auto& t : (*loaded)->data.tensors) out[t.name] = t.bytes;
  out["step"] = std::to_string((*loaded)->data.step());
  return out;
}

// Every tensor of `got` equals the one-go run's, bit for bit.
void check_same_tensors(const std::map<std::string, std::string>& got,
                        const std::map<std::string, std::string>& expected) {
  REQUIRE(got.size() == expected.size());
  for (const auto& [name, bytes] : expected) {
    INFO(name);
    CHECK(got.at(name) == bytes);
  }
}

TEST_CASE("worker shards killed, terminated and stopped anywhere equal one run", "[integration]") {
  const fs::path whole_dir = fresh_dir("whole");
  const auto whole_job = write_job(whole_dir, job_json(R"({"steps": 1000})"));
  const auto one = run_worker(whole_job, whole_dir / "ckpt");
  CHECK(one.status == exit_status::exited(0));
  check_clean_end(one, whole_dir / "ckpt");
  REQUIRE(last_of<protocol::done_msg>(one));
  CHECK(last_of<protocol::done_msg>(one)->step == 48);
  CHECK(last_of<protocol::done_msg>(one)->job_complete);
  const auto expected = final_tensors(whole_dir / "ckpt");
  CHECK(expected.at("step") == "48");
  CHECK(expected.count("optimizer.layers.2.kernel.v") == 1);

  // Delays scale with this machine's speed: a stop lands anywhere in a 7-step shard, a kill
  // anywhere from start-up to the shard's end. A shared machine's speed drifts, so the step time
  // is re-measured from every worker that runs to a clean end, and each stop that arrives after
  // its shard already ended halves the range (a worker reads stdin on its own thread, which a
  // loaded machine may schedule late): the stops keep landing inside shards.
  auto step_time = (one.last_message - one.first_progress) / 48;
  const auto startup_time = one.first_progress;
  int stop_range_halvings = 0;
  const std::uint64_t seed = GENERATE(1u, 2u, 3u);
  INFO("scenario seed " << seed);
  std::mt19937_64 gen(seed);
  const fs::path dir = fresh_dir("shards");
  const auto job = write_job(dir, job_json(R"({"steps": 7})"));
  int kills = 0, stops = 0, completes = 0;
  std::int64_t last_step = 0;
  bool complete = false;
  for (int run = 0; run < 200 && !complete; ++run) {
    // Mostly interrupted runs; an undisturbed one now and then.
    const auto act = gen() % 10 == 0 ? action::none : static_cast<action>(1 + gen() % 3);
    // Stops aim at the first half of the shard, so that even on a fast machine most land
    // before the shard's own end (a stop after it just finds the worker done).
    const auto shard_time = 6 * step_time;
    const auto range =
        act == action::kill ? startup_time + shard_time : shard_time / (2 << stop_range_halvings);
    const auto delay = std::chrono::microseconds(
        gen() % static_cast<std::uint64_t>(std::max<std::int64_t>(range.count(), 1)));
    INFO("run " << run << " action " << static_cast<int>(act) << " delay " << delay.count());
    const auto r = run_worker(job, dir / "ckpt", act, delay);
    if (r.status.killed_by_signal()) {
      CHECK(r.status.code == 9);  // only our SIGKILL may kill it
      CHECK(act == action::kill);
      ++kills;
      continue;
    }
    if (r.status.code == 3) {
      CHECK((act == action::stop || act == action::terminate));
      check_clean_end(r, dir / "ckpt");
      CHECK_FALSE(last_of<protocol::done_msg>(r)->job_complete);
      ++stops;
    } else {
      CHECK(r.status == exit_status::exited(0));
      check_clean_end(r, dir / "ckpt");
      ++completes;
    }
    const auto* done = last_of<protocol::done_msg>(r);
    // Shards are aligned: a full shard ends on a multiple of 7 or at the last step.
    if (r.status.code == 0) CHECK((done->step % 7 == 0 || done->step == 48));
    if (r.status.code == 0 && (act == action::stop || act == action::terminate)) {
      stop_range_halvings = std::min(stop_range_halvings + 1, 6);
    }
    if (done->step > last_step && r.first_progress.count() > 0) {
      step_time = (r.last_message - r.first_progress) / (done->step - last_step);
    }
    CHECK(done->step >= last_step);
    last_step = done->step;
    complete = done->job_complete;
  }
  REQUIRE(complete);
  CHECK(stops > 0);
  CHECK(kills > 0);
  CHECK(kills + stops + completes >= 7);
  check_same_tensors(final_tensors(dir / "ckpt"), expected);
  fs::remove_all(dir);
  fs::remove_all(whole_dir);
}

TEST_CASE("workers started ahead wait for resume, then train on to the same weights",
          "[integration]") {
  const fs::path whole_dir = fresh_dir("ahead-whole");
  const auto whole_job = write_job(whole_dir, job_json(R"({"steps": 1000})"));
  REQUIRE(run_worker(whole_job, whole_dir / "ckpt").status == exit_status::exited(0));
  const auto expected = final_tensors(whole_dir / "ckpt");

  const fs::path dir = fresh_dir("ahead");
  const auto job = write_job(dir, job_json(R"({"steps": 7})"));
  // Started ahead with nothing to resume from: it says so, naming the folder.
  const auto nothing = run_worker(job, dir / "ckpt", action::resume, 0us);
  CHECK(nothing.status == exit_status::exited(1));
  REQUIRE(last_of<protocol::error_msg>(nothing));
  CHECK_THAT(last_of<protocol::error_msg>(nothing)->message,
             Catch::Contains("holds no checkpoint"));
  CHECK_THAT(last_of<protocol::error_msg>(nothing)->message,
             Catch::Contains(fs::absolute(dir / "ckpt").lexically_normal().string()));

  REQUIRE(run_worker(job, dir / "ckpt").status == exit_status::exited(0));  // steps 0..7
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& f : fs::directory_iterator(dir / "ckpt")) {
      names.push_back(f.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  // Told to stop, or SIGTERMed, before its turn: it trained nothing and writes nothing.
  for (const auto act : {action::stop_before_turn, action::terminate_before_turn}) {
    const auto before = listing();
    const auto r = run_worker(job, dir / "ckpt", act, 100ms);
    CHECK(r.status == exit_status::exited(3));
    CHECK(r.messages.size() == 1);  // hello only
    CHECK(listing() == before);
  }
  bool complete = false;
  for (int shard = 0; shard < 10 && !complete; ++shard) {
    // The resume comes 150 ms after hello: nothing but hello may come before it.
    const auto r = run_worker(job, dir / "ckpt", action::resume, 150ms);
    REQUIRE(r.status == exit_status::exited(0));
    check_clean_end(r, dir / "ckpt");
    REQUIRE(r.acted_at.count() > 0);
    CHECK(r.first_progress >= r.acted_at);
    const auto* first = std::get_if<protocol::progress_msg>(&r.messages.at(1));
    REQUIRE(first);
    // Every progress names the shard's end: the supervisor starts the next worker from it.
    CHECK(first->shard_end_step == std::min<std::int64_t>(48, (first->step / 7 + 1) * 7));
    complete = last_of<protocol::done_msg>(r)->job_complete;
  }
  REQUIRE(complete);
  check_same_tensors(final_tensors(dir / "ckpt"), expected);
  // Each worker's last line says where its shard's time went. The resume came 150 ms after
  // hello, and set-up is counted from hello: set-up and the wait add up to that at least (less
  // two truncated milliseconds), however slow the machine.
  std::ifstream log(dir / "worker.log");
  const std::regex timings(
      R"(wrote .*ckpt-\d+\.safetensors(; job complete)? \(set-up (\d+) ms, waited (\d+) ms for )"
      R"(its turn, restore \d+ ms, [67] steps in [0-9.]+ s \(the first [0-9.]+ ms\), save \d+ ms\)$)");
  int ahead_lines = 0;
  for (std::string line; std::getline(log, line);) {
    std::smatch m;
    if (line.find("waited") == std::string::npos || line.find(" wrote ") == std::string::npos) {
      continue;
    }
    ++ahead_lines;
    INFO(line);
    REQUIRE(std::regex_search(line, m, timings));
    CHECK(std::stoi(m[2].str()) + std::stoi(m[3].str()) >= 148);
  }
  CHECK(ahead_lines >= 6);  // 48 steps in shards of 7, the first of which was not started ahead
  fs::remove_all(dir);
  fs::remove_all(whole_dir);
}

TEST_CASE("worker stop before and after the job's end", "[integration]") {
  const fs::path dir = fresh_dir("stop");
  // The whole run as one shard, each step also touching 8 MiB: the worker's stdin thread, which
  // a loaded machine may schedule late, has the whole run's tens of milliseconds to see the stop
  // rather than the microseconds of a 7-step shard.
  const auto job =
      write_job(dir, job_json(R"({"steps": 48})", R"(, "debug": {"leak_mib_per_step": 8})"));
  // Stop arriving at once: no step is lost, a step-0 checkpoint is written, exit 3.
  auto first = run_worker(job, dir / "ckpt", action::stop_at_start);
  CHECK(first.status.code == 3);
  check_clean_end(first, dir / "ckpt");
  // A finished job: the worker re-announces its last checkpoint and says so.
  const auto job2 = write_job(dir, job_json(R"({"steps": 100})"));
  auto all = run_worker(job2, dir / "ckpt");
  CHECK(all.status == exit_status::exited(0));
  auto again = run_worker(job2, dir / "ckpt");
  CHECK(again.status == exit_status::exited(0));
  check_clean_end(again, dir / "ckpt");
  CHECK(last_of<protocol::done_msg>(again)->job_complete);
  CHECK(last_of<protocol::done_msg>(again)->step == 48);
  fs::remove_all(dir);
}

TEST_CASE("worker progress messages carry epoch metrics", "[integration]") {
  const fs::path dir = fresh_dir("progress");
  const auto job = write_job(dir, job_json(R"({"epochs": 1})", "", "0.25"));
  auto r = run_worker(job, dir / "ckpt");
  CHECK(r.status == exit_status::exited(0));
  bool saw_epoch_end = false;
  for (const auto& m : r.messages) {
    if (const auto* p = std::get_if<protocol::progress_msg>(&m)) {
      CHECK(p->total_steps == 36);
      if (p->step == 12) {
        saw_epoch_end = true;
        CHECK(p->epoch == 0);
        CHECK(p->metrics.count("accuracy") == 1);
        CHECK(p->metrics.count("val_loss") == 1);
        CHECK(p->metrics.count("val_accuracy") == 1);
      }
    }
  }
  CHECK(saw_epoch_end);
  fs::remove_all(dir);
}

TEST_CASE("worker fault injection and bad input", "[integration]") {
  const fs::path dir = fresh_dir("faults");
  SECTION("crash_at_step aborts with signal 6 before that step") {
    const auto job =
        write_job(dir, job_json(R"({"steps": 7})", R"(, "debug": {"crash_at_step": 3})"));
    auto r = run_worker(job, dir / "ckpt");
    CHECK(r.status == exit_status::signaled(6));
    CHECK_FALSE(last_of<protocol::checkpoint_msg>(r));
  }
  SECTION("a missing data file: exit 2 and an error naming it") {
    const auto job =
        write_job(dir, R"({"name": "bad", "data": {"type": "csv", "path": "missing.csv"},
          "model": {"layers": [{"units": 1, "activation": "sigmoid"}]}})");
    auto r = run_worker(job, dir / "ckpt");
    CHECK(r.status == exit_status::exited(2));
    const auto* e = last_of<protocol::error_msg>(r);
    REQUIRE(e);
    CHECK_THAT(e->message, Catch::Contains("missing.csv"));
  }
  SECTION("a corrupt data file: exit 2 and an error naming the line") {
    std::ofstream(dir / "data.csv") << "a,b,label\n1,2,0\n3,x,1\n";
    const auto job = write_job(dir, R"({"name": "bad", "data": {"type": "csv", "path": "data.csv"},
          "model": {"layers": [{"units": 1, "activation": "sigmoid"}]}})");
    auto r = run_worker(job, dir / "ckpt");
    CHECK(r.status == exit_status::exited(2));
    const auto* e = last_of<protocol::error_msg>(r);
    REQUIRE(e);
    CHECK_THAT(e->message, Catch::Contains("data.csv:3"));
  }
  SECTION("bad command line: exit 2 after hello and an error") {
    boost::asio::io_context io;
    baton::os::spawn_options o;
    o.argv = {BATON_WORKER_EXE, "--bogus"};
    o.env = {{"BATON_JOB_FILE", ""}, {"BATON_CHECKPOINT_DIR", ""}};
    auto p = baton::os::spawn(io, o);
    REQUIRE(p);
    std::vector<std::string> lines;
    bool exited = false, read_done = false;
    exit_status st;
    (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view l) {
      if (ec)
        read_done = true;
      else
        lines.emplace_back(l);
    });
    (*p)->async_wait([&](const boost::system::error_code&, exit_status s) {
      st = s;
      exited = true;
    });
    REQUIRE(run_until(io, [&] { return exited && read_done; }));
    CHECK(st == exit_status::exited(2));
    REQUIRE(lines.size() == 2);
    CHECK(std::holds_alternative<protocol::hello_msg>(
        protocol::decode_worker_message(lines[0]).value()));
    CHECK_THAT(
        std::get<protocol::error_msg>(protocol::decode_worker_message(lines[1]).value()).message,
        Catch::Contains("--bogus"));
  }
  SECTION("hang_at_step goes silent, ignores stop, and leaks what it was told to") {
    const auto job = write_job(
        dir,
        job_json(R"({"steps": 40})", R"(, "debug": {"hang_at_step": 10, "leak_mib_per_step": 8})"));
    boost::asio::io_context io;
    baton::os::spawn_options o;
    o.argv = {BATON_WORKER_EXE,        "--job",     job.string(), "--checkpoint-dir",
              (dir / "ckpt").string(), "--threads", "1"};
    o.stderr_log = dir / "worker.log";
    auto p = baton::os::spawn(io, o);
    REQUIRE(p);
    std::vector<std::string> lines;
    bool exited = false, read_done = false;
    exit_status st;
    (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view l) {
      if (ec)
        read_done = true;
      else
        lines.emplace_back(l);
    });
    (*p)->async_wait([&](const boost::system::error_code&, exit_status s) {
      st = s;
      exited = true;
    });
    // The worker says on stderr when it hangs; by then 10 steps have leaked 80 MiB.
    const auto hanging = [&] {
      std::ifstream log(dir / "worker.log");
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      return text.find("hanging at step 10") != std::string::npos;
    };
    REQUIRE(run_until(io, hanging, 20s));
    auto rss = (*p)->rss_bytes();
    REQUIRE(rss);
    CHECK(*rss >= (80u << 20));
    (*p)->async_write_line(protocol::encode(protocol::stop_msg{}),
                           [](const boost::system::error_code&) {});
    REQUIRE(((*p)->signal_group(baton::os::group_signal::terminate)));
    const std::size_t seen = lines.size();
    run_until(
        io, [&] { return exited; }, 500ms);
    CHECK_FALSE(exited);  // hung: neither stop nor SIGTERM ends it
    CHECK(lines.size() == seen);
    for (const auto& l : lines) {
      auto m = protocol::decode_worker_message(l);
      REQUIRE(m);
      CHECK_FALSE(std::holds_alternative<protocol::done_msg>(*m));
    }
    REQUIRE(((*p)->signal_group(baton::os::group_signal::kill)));
    REQUIRE(run_until(io, [&] { return exited && read_done; }));
    CHECK(st == exit_status::signaled(9));
  }
  fs::remove_all(dir);
}

TEST_CASE("worker skips a corrupt newest checkpoint and says why on stderr", "[integration]") {
  const fs::path dir = fresh_dir("corrupt");
  const auto job = write_job(dir, job_json(R"({"steps": 7})"));
  REQUIRE(run_worker(job, dir / "ckpt").status == exit_status::exited(0));
  REQUIRE(run_worker(job, dir / "ckpt").status == exit_status::exited(0));
  const fs::path newest = dir / "ckpt" / "ckpt-000000000014.safetensors";
  REQUIRE(fs::exists(newest));
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  const auto r = run_worker(job, dir / "ckpt");
  CHECK(r.status == exit_status::exited(0));
  check_clean_end(r, dir / "ckpt");
  CHECK(last_of<protocol::done_msg>(r)->step == 14);  // redone from step 7
  std::ifstream log(dir / "worker.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("rejected checkpoint " + newest.string()) &&
                       Catch::Contains("digest mismatch"));
  fs::remove_all(dir);
}

}  // namespace worker_resume_test
