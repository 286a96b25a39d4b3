// `baton serve` and the client verbs as real processes: the daemon is the built `baton`
// executable, its workers are the example Python trainer, and the checks go through the CLI and
// the socket exactly as a user would.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/process.h"
#include "supervisor/bad_api_requests.h"
#include "supervisor/cli.h"
#include "supervisor/control_client.h"
#include "support/daemon_process.h"
#include "support/skip.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using baton::supervisor::api_response;
namespace control_client = baton::supervisor::control_client;
using baton::test::daemon_process;
using baton::test::pid_gone;
using baton::test::python;
using baton::test::read_text;
using baton::test::run_baton;
using baton::test::take_err;
using baton::test::trim;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace daemon_test {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-itest-" + name);
}

// A job for the example Python worker. `features` sets the cost of a step (400 is about 5 ms),
// samples 2048 and batch 256 give 8 steps per epoch.
fs::path write_job(const fs::path& dir, const std::string& name, int epochs, int shard_epochs,
                   int features = 8) {
  const json doc = {
      {"name", name},
      {"data", {{"type", "synthetic"}, {"samples", 2048}, {"features", features}, {"seed", 3}}},
      {"model", {{"layers", {{{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"optimizer", {{"type", "sgd"}, {"learning_rate", 0.5}}},
        {"batch_size", 256},
        {"epochs", epochs}}},
      {"shard", {{"epochs", shard_epochs}}},
      {"memory", {{"poll_ms", 50}}},
      {"worker",
       {{"command",
         {python(), std::string(BATON_SOURCE_DIR) + "/configs/examples/python-worker/train.py"}}}}};
  const auto file = dir / (name + ".json");
  std::ofstream(file) << doc.dump(2);
  return file;
}

// Sends raw bytes on a fresh connection and returns everything the daemon answers before it
// closes (or the deadline passes).
std::string raw_exchange(const fs::path& socket, const std::string& bytes) {
  asio::io_context io;
  asio::local::stream_protocol::socket s(io);
  s.connect(asio::local::stream_protocol::endpoint(socket.string()));
  boost::system::error_code ec;
  asio::write(s, asio::buffer(bytes), ec);  // may fail once the daemon answers and closes
  std::string answer;
  std::array<char, 4096> buf;
  const auto deadline = clock_type::now() + 5s;
  s.non_blocking(true);
  while (clock_type::now() < deadline) {
    const auto n = s.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block) {
      std::this_thread::sleep_for(10ms);
      continue;
    }
    if (ec) break;
    answer.append(buf.data(), n);
  }
  return answer;
}

TEST_CASE("serve, submit, list, status, logs, wait, cancel round trip", "[integration][daemon]") {
  const auto dir = scratch("roundtrip");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();

  const auto job = write_job(dir, "rt", 3, 1);
  auto sub = run_baton({"submit", job.string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  CHECK(id == "rt-1");
  // The second job is long enough that it is still queued or running when it is cancelled below,
  // however fast the machine: the same name, so the same id sequence.
  fs::create_directories(dir / "long");
  const auto long_job = write_job(dir / "long", "rt", 1000, 1);
  auto sub_json = run_baton({"submit", long_job.string(), "--json", "--socket", sock}, err);
  REQUIRE(sub_json.code == 0);
  CHECK(json::parse(sub_json.out).at("id") == "rt-2");

  auto list = run_baton({"list", "--socket", sock}, err);
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("rt-1") && Catch::Contains("rt-2"));
  auto list_json = run_baton({"list", "--json", "--socket", sock}, err);
  CHECK(json::parse(list_json.out).at("jobs").size() == 2);
  CHECK(json::parse(list_json.out).at("schema_version") == 1);

  // The long job cannot end within 0.2 s on any machine, so the wait gives up with its own exit
  // code. (rt-1, 24 steps in 3 shards, can finish in that time on a fast one.)
  auto short_wait = run_baton({"wait", "rt-2", "--socket", sock, "--timeout", "0.2"}, err);
  CHECK(short_wait.code == baton::supervisor::exit_timeout);
  CHECK_THAT(read_text(err), Catch::Contains("job rt-2 did not finish within 0.2 s"));

  auto wait = run_baton({"wait", id, "--socket", sock}, err);
  INFO(d.log());
  CHECK(wait.code == 0);
  CHECK(trim(wait.out) == "job rt-1: completed");

  auto st = run_baton({"status", id, "--json", "--socket", sock}, err);
  REQUIRE(st.code == 0);
  const auto s = json::parse(st.out);
  CHECK(s.at("schema_version") == 1);
  CHECK(s.at("state") == "completed");
  CHECK(s.at("checkpoint_step") == 24);
  CHECK(s.at("shards").size() == 3);
  CHECK(s.at("shards")[0].at("cause") == "completed");
  auto human = run_baton({"status", id, "--socket", sock}, err);
  CHECK_THAT(human.out, Catch::Contains("job rt-1 (rt): completed"));
  CHECK_THAT(human.out, Catch::Contains("step 24/24"));
  CHECK_THAT(human.out, Catch::Contains("peak RSS"));
  CHECK_THAT(human.out, Catch::Contains("checkpoint: step 24 at "));

  // Colour: never into a pipe on its own, nor under NO_COLOR, but --color=always wins over both.
  const std::string esc = "\x1b[";
  CHECK(human.out.find(esc) == std::string::npos);
  const auto painted = run_baton({"status", id, "--color=always", "--socket", sock}, err);
  CHECK_THAT(painted.out, Catch::Contains("job rt-1 (rt): \x1b[1;32mcompleted\x1b[0m"));
  const auto no_color =
      run_baton({"list", "--color=auto", "--socket", sock}, err, 30s, {{"NO_COLOR", "1"}});
  CHECK_THAT(no_color.out, Catch::Contains("rt-1"));
  CHECK(no_color.out.find(esc) == std::string::npos);
  const auto forced =
      run_baton({"--color=always", "list", "--socket", sock}, err, 30s, {{"NO_COLOR", "1"}});
  CHECK_THAT(forced.out, Catch::Contains("\x1b[1;32mcompleted\x1b[0m"));
  take_err(err);
  CHECK(run_baton({"status", "nope-1", "--color=always", "--socket", sock}, err).code == 1);
  CHECK_THAT(take_err(err), Catch::Contains("\x1b[1;31mbaton:\x1b[0m no job 'nope-1'"));
  CHECK(run_baton({"status", "nope-1", "--socket", sock}, err, 30s, {{"NO_COLOR", "1"}}).code == 1);
  CHECK(take_err(err).find(esc) == std::string::npos);

  auto logs = run_baton({"logs", id, "--socket", sock}, err);
  CHECK(logs.code == 0);
  CHECK_THAT(logs.out, Catch::Contains("[baton] job completed"));
  auto follow = run_baton({"logs", id, "--follow", "--socket", sock}, err);
  CHECK(follow.code == 0);
  CHECK(follow.out == logs.out);

  take_err(err);
  auto cancel_done = run_baton({"cancel", id, "--socket", sock}, err);
  CHECK(cancel_done.code == 1);
  CHECK_THAT(take_err(err), Catch::Contains("already completed"));
  auto resume_done = run_baton({"resume", id, "--socket", sock}, err);
  CHECK(resume_done.code == 1);
  CHECK_THAT(take_err(err),
             Catch::Contains("only a paused, failed or cancelled job can be resumed"));
  auto missing = run_baton({"status", "nope-1", "--socket", sock}, err);
  CHECK(missing.code == 1);
  CHECK_THAT(take_err(err), Catch::Contains("no job 'nope-1'"));

  // An invalid config: exit 2, every problem on its own line, each naming the file.
  const auto bad = dir / "bad.json";
  std::ofstream(bad) << R"({"name": "bad", "training": {"epochs": 0, "batch_sise": 3}})";
  auto sub_bad = run_baton({"submit", bad.string(), "--socket", sock}, err);
  CHECK(sub_bad.code == 2);
  const auto bad_err = take_err(err);
  CHECK_THAT(bad_err, Catch::Contains(bad.string() + ": training.epochs"));
  CHECK_THAT(bad_err, Catch::Contains(bad.string() + ": training.batch_sise"));

  // wait on a job that ends other than completed exits 1.
  auto second = run_baton({"cancel", "rt-2", "--socket", sock}, err);
  CHECK(second.code == 0);
  auto wait2 = run_baton({"wait", "rt-2", "--socket", sock}, err);
  CHECK(wait2.code == 1);
  CHECK(d.status("rt-2").at("state") == "cancelled");

  d.signal(false);
  auto st_exit = d.wait(10s);
  REQUIRE(st_exit);
  CHECK(st_exit->success());
  CHECK_FALSE(fs::exists(d.socket()));

  // Nobody listens any more: a clear message and exit 1.
  take_err(err);
  auto gone = run_baton({"list", "--socket", sock}, err);
  CHECK(gone.code == 1);
  CHECK_THAT(take_err(err), Catch::Contains("cannot connect to baton daemon at " + sock) &&
                                Catch::Contains("(is `baton serve` running?)"));
  for (const auto* verb :
       {"serve", "submit", "list", "status", "logs", "cancel", "resume", "wait"}) {
    auto help = run_baton({verb, "--help"}, err);
    CHECK(help.code == 0);
    CHECK_THAT(help.out, Catch::Contains("--socket"));
  }
}

TEST_CASE("with max_workers 1 the second job waits queued until the first ends",
          "[integration][daemon]") {
  const auto dir = scratch("fifo");
  const auto err = dir / "client.err";
  daemon_process d(dir, {"--max-workers", "1"});
  const auto sock = d.socket().string();
  const auto first = trim(
      run_baton({"submit", write_job(dir, "first", 40, 10, 200).string(), "--socket", sock}, err)
          .out);
  const auto second = trim(
      run_baton({"submit", write_job(dir, "second", 2, 1).string(), "--socket", sock}, err).out);
  REQUIRE(first == "first-1");
  REQUIRE(second == "second-1");
  d.poll(first, [](const json& s) { return s.at("step").get<int>() > 0; });
  auto s2 = d.status(second);
  CHECK(s2.at("state") == "queued");
  CHECK(s2.at("queue_position") == 1);
  CHECK(s2.at("shards").empty());
  CHECK(run_baton({"wait", second, "--socket", sock}, err).code == 0);
  const auto s1 = d.status(first);
  CHECK(s1.at("state") == "completed");
  CHECK(d.status(second)["shards"][0]["started_ms"].get<std::int64_t>() >=
        s1["shards"].back()["ended_ms"].get<std::int64_t>());
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("SIGKILL of the daemon takes its workers along, and a new daemon finishes the job",
          "[integration][daemon]") {
  const auto dir = scratch("sigkill");
  const auto err = dir / "client.err";
  std::string id;
  std::int64_t worker_pid = 0;
  {
    daemon_process d(dir);
    id = trim(run_baton({"submit", write_job(dir, "k", 40, 20, 400).string(), "--socket",
                         d.socket().string()},
                        err)
                  .out);
    REQUIRE(id == "k-1");
    const auto s =
        d.poll(id, [](const json& s) { return s.at("live").is_object() && s["step"] >= 3; });
    worker_pid = s["live"]["pid"].get<std::int64_t>();
    REQUIRE(worker_pid > 0);
    REQUIRE_FALSE(pid_gone(worker_pid));
    d.signal(true);
    auto st = d.wait(5s);
    REQUIRE(st);
    CHECK(st->killed_by_signal());
    const auto deadline = clock_type::now() + 2s;
    while (!pid_gone(worker_pid) && clock_type::now() < deadline) std::this_thread::sleep_for(20ms);
    CHECK(pid_gone(worker_pid));
  }
  daemon_process d2(dir);
  auto wait = run_baton({"wait", id, "--socket", d2.socket().string()}, err);
  INFO(d2.log());
  CHECK(wait.code == 0);
  const auto s = d2.status(id);
  CHECK(s.at("state") == "completed");
  CHECK(s.at("checkpoint_step") == 320);
  // The killed worker is in the history as stopped, with the reason.
  bool found = false;
  for (const auto& sh : s.at("shards")) {
    if (sh.at("pid") == worker_pid) {
      found = true;
      CHECK(sh.at("cause") == "stopped");
      CHECK_THAT(sh.at("detail").get<std::string>(), Catch::Contains("supervisor exited"));
    }
  }
  CHECK(found);
  d2.signal(false);
  REQUIRE(d2.wait(10s));
}

TEST_CASE("SIGTERM: workers checkpoint, the daemon exits 0, a new one resumes",
          "[integration][daemon]") {
  const auto dir = scratch("sigterm");
  const auto err = dir / "client.err";
  std::string id;
  std::int64_t stopped_at = 0;
  {
    daemon_process d(dir);
    id = trim(run_baton({"submit", write_job(dir, "t", 40, 40, 400).string(), "--socket",
                         d.socket().string()},
                        err)
                  .out);
    REQUIRE(id == "t-1");
    d.poll(id, [](const json& s) { return s.at("step").get<int>() >= 5; });
    d.signal(false);
    auto st = d.wait(10s);
    INFO(d.log());
    REQUIRE(st);
    CHECK(st->success());
    CHECK_THAT(d.log(), Catch::Contains("queued for the next start"));
  }
  {
    // The job was persisted as queued with a fresh checkpoint; a new daemon picks it up itself.
    daemon_process d(dir);
    const auto s = d.poll(id, [](const json& s) { return s.at("shards").size() >= 2; });
    const auto& stopped = s.at("shards")[0];
    CHECK(stopped.at("cause") == "stopped");
    stopped_at = stopped.at("end_step").get<std::int64_t>();
    CHECK(stopped_at >= 5);
    CHECK(s.at("shards")[1].at("start_step") == stopped_at);
    auto wait = run_baton({"wait", id, "--socket", d.socket().string()}, err);
    INFO(d.log());
    CHECK(wait.code == 0);
    CHECK(d.status(id).at("checkpoint_step") == 320);
    d.signal(false);
    REQUIRE(d.wait(10s));
  }
}

TEST_CASE("API abuse gets errors and the daemon keeps serving", "[integration][daemon]") {
  const auto dir = scratch("abuse");
  daemon_process d(dir);
  const auto healthy = [&] {
    auto h = control_client::call(d.socket(), "GET", "/v1/health");
    return h && h->status == 200 && h->body.at("status") == "ok";
  };

  auto big = raw_exchange(d.socket(),
                          "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: 2097152\r\n\r\n" +
                              std::string(64 * 1024, ' '));
  CHECK_THAT(big, Catch::StartsWith("HTTP/1.1 413"));
  CHECK(healthy());

  const std::string deep = "{\"spec\": " + std::string(100000, '[') + std::string(100000, ']') +
                           ", \"base_dir\": \"/\"}";
  auto deep_answer = raw_exchange(
      d.socket(), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(deep.size()) + "\r\nConnection: close\r\n\r\n" + deep);
  CHECK_THAT(deep_answer, Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(deep_answer, Catch::Contains("nested deeper than 64"));
  CHECK(healthy());

  auto garbage = raw_exchange(d.socket(), "\x01\x02 not http at all\r\n\r\n");
  CHECK_THAT(garbage, Catch::StartsWith("HTTP/1.1 400"));
  CHECK(healthy());

  // A valid request with a hostile spec: the job spec parser reports it, the daemon goes on.
  auto spec = control_client::call(d.socket(), "POST", "/v1/jobs",
                                   json{{"spec", {{"name", "../../etc"}}}, {"base_dir", "/"}});
  REQUIRE(spec);
  CHECK(spec->status == 400);
  auto unknown = control_client::call(d.socket(), "DELETE", "/v1/jobs");
  REQUIRE(unknown);
  CHECK(unknown->status == 405);
  auto bad_id = control_client::call(d.socket(), "GET", "/v1/jobs/..");
  REQUIRE(bad_id);
  CHECK(bad_id->status == 400);
  CHECK(healthy());
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("a daemon job whose script is missing: status shows the log's path and last lines",
          "[integration][daemon]") {
  const auto dir = scratch("crashtail");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();
  const json doc = {{"name", "crashtail"},
                    {"worker", {{"command", {python(), "/nonexistent.py"}}}},
                    {"shard", {{"steps", 5}}},
                    {"restart", {{"max_failures", 1}}},
                    {"params", {{"total_steps", 5}}}};
  const auto file = dir / "crashtail.json";
  std::ofstream(file) << doc.dump(2);
  const auto sub = run_baton({"submit", file.string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  CHECK(run_baton({"wait", id, "--socket", sock}, err).code == 1);
  const auto js = run_baton({"status", id, "--json", "--socket", sock}, err);
  REQUIRE(js.code == 0);
  const auto s = json::parse(js.out);
  CHECK(s.at("state") == "failed");
  const auto log = s.at("log_path").get<std::string>();
  CHECK_THAT(log, Catch::EndsWith("worker.log"));
  REQUIRE(s.at("log_tail").is_array());
  CHECK(s.at("log_tail").size() <= 5);
  CHECK_THAT(s.at("log_tail").back().get<std::string>(),
             Catch::Contains("No such file or directory"));
  const auto text = run_baton({"status", id, "--socket", sock}, err);
  CHECK_THAT(text.out, Catch::Contains("  last lines of " + log + ":\n"));
  CHECK_THAT(text.out, Catch::Contains("No such file or directory"));
}

TEST_CASE(
    "a client with no --socket finds a daemon on the system socket, and names where it looked",
    "[integration][daemon]") {
  // The system socket is /run/baton/baton.sock; BATON_SYSTEM_SOCKET moves it for this test, and
  // an XDG_RUNTIME_DIR without a daemon makes the user's own socket absent (for root, the own
  // socket is /run/baton/baton.sock itself, which no test daemon uses).
  if (::geteuid() == 0 && fs::exists("/run/baton/baton.sock")) {
    BATON_SKIP("a daemon listens on /run/baton/baton.sock, root's own socket");
  }
  const auto dir = scratch("discovery");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const std::vector<std::pair<std::string, std::string>> env = {
      {"BATON_SOCKET", ""},
      {"XDG_RUNTIME_DIR", (dir / "no-runtime").string()},
      {"BATON_SYSTEM_SOCKET", d.socket().string()}};
  const auto list = run_baton({"list", "--json"}, err, 30s, env);
  INFO(read_text(err));
  CHECK(list.code == 0);
  CHECK(json::parse(list.out).at("jobs").empty());

  // Nothing on the system socket either: every place is named.
  take_err(err);
  const auto none = (dir / "none.sock").string();
  const auto gone = run_baton({"list"}, err, 30s,
                              {{"BATON_SOCKET", ""},
                               {"XDG_RUNTIME_DIR", (dir / "no-runtime").string()},
                               {"BATON_SYSTEM_SOCKET", none}});
  CHECK(gone.code == 1);
  const auto said = take_err(err);
  CHECK_THAT(said, Catch::Contains("cannot connect to baton daemon at " + none));
  if (::geteuid() != 0) {
    CHECK_THAT(said, Catch::Contains("also looked at " + (dir / "no-runtime").string() +
                                     "/baton/baton.sock (your own daemon's socket: not there)"));
  } else {
    CHECK_THAT(said, Catch::Contains("also looked at /run/baton/baton.sock"));
  }
}

TEST_CASE("a foreign uid is refused with 403", "[integration][daemon]") {
  if (::geteuid() != 0) BATON_SKIP("switching to another uid needs root");
  const auto dir = scratch("foreign");
  fs::permissions(dir, fs::perms::all, fs::perm_options::replace);
  daemon_process d(dir);
  // Loosen the file mode on purpose: the kernel-checked identity must still keep nobody out.
  fs::permissions(d.socket(), fs::perms::all, fs::perm_options::replace);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    auto r = control_client::call(d.socket(), "GET", "/v1/jobs", nullptr, 5s);
    const bool refused = r && r->status == 403 &&
                         r->body.value("error", "").find("permission denied") != std::string::npos;
    ::_exit(refused ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  auto ok = control_client::call(d.socket(), "GET", "/v1/health");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("every malformed API request gets its exact error from a live daemon, which stays up",
          "[integration][daemon]") {
  const auto dir = scratch("bad-api-live");
  daemon_process d(dir);
  int rows = 0;
  for (const auto& row : baton::supervisor::testing::bad_api_requests()) {
    // Bodies past the daemon's read limit are refused before routing; the table's own 413 rows
    // cover that, with the same status.
    INFO(row.what);
    std::string request = row.method + " " + (row.target.empty() ? "/" : row.target) +
                          " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                          std::to_string(row.body.size()) + "\r\nConnection: close\r\n\r\n" +
                          row.body;
    if (row.target.empty() || row.target.front() != '/') {
      // HTTP itself cannot carry such targets to the router; parse_api_request's table covers
      // them, and here the daemon must still answer the request line it gets.
      request.replace(0, request.find(" HTTP/1.1"), row.method + " " + row.target);
    }
    const auto answer = raw_exchange(d.socket(), request);
    REQUIRE_FALSE(answer.empty());
    const auto status_line_end = answer.find("\r\n");
    const auto status = std::stoi(answer.substr(9, 3));
    INFO(answer.substr(0, status_line_end));
    CHECK(status >= 400);
    CHECK(status < 500);
    if (row.target.rfind("/", 0) == 0 && row.body.size() < (1u << 20)) {
      CHECK(status == row.status);
      const auto body = json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
      CHECK(body.at("error") == row.message);
    }
    // After every bad request the daemon still serves a good one.
    auto h = control_client::call(d.socket(), "GET", "/v1/health", nullptr, 2s);
    REQUIRE(h);
    CHECK(h->status == 200);
    ++rows;
  }
  CHECK(rows >= 20);
  d.signal(false);
  CHECK(d.wait(10s) == baton::os::exit_status::exited(0));
}

TEST_CASE("status shows the total a command worker reports when its job cannot give one",
          "[integration][daemon]") {
  const auto dir = scratch("own-total");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();
  // No data, model or training: only the worker knows the job is 12 steps long.
  const json doc = {
      {"name", "own"},
      {"worker",
       {{"command",
         {python(),
          std::string(BATON_SOURCE_DIR) + "/tests/integration/workers/chatty_worker.py"}}}},
      {"shard", {{"steps", 5}}},
      {"memory", {{"poll_ms", 50}}},
      {"params", {{"total_steps", 12}, {"steps_per_epoch", 4}, {"dataset", "toy"}, {"lr", 0.1}}}};
  const auto job = dir / "own.json";
  std::ofstream(job) << doc.dump(2);
  auto sub = run_baton({"submit", job.string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  auto wait = run_baton({"wait", id, "--socket", sock}, err);
  INFO(d.log());
  CHECK(wait.code == 0);
  const auto s = d.status(id);
  CHECK(s.at("state") == "completed");
  CHECK(s.at("total_steps") == 12);
  auto human = run_baton({"status", id, "--socket", sock}, err);
  CHECK_THAT(human.out, Catch::Contains("step 12/12 (100.0%)"));
  auto list = run_baton({"list", "--socket", sock}, err);
  CHECK_THAT(list.out, Catch::Contains("12/12"));
  d.signal(false);
  CHECK(d.wait(10s) == baton::os::exit_status::exited(0));
}

// ---- issue 12: one daemon per state directory, a socket that stays open, limits ----

TEST_CASE("a second daemon on the same state directory refuses, naming the first's pid",
          "[integration][daemon]") {
  // Two daemons with different sockets once both ran the same queued jobs.
  const auto dir = scratch("second-daemon");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto pid = std::to_string(d.pid());
  auto second = run_baton(
      {"serve", "--state-dir", (dir / "state").string(), "--socket", (dir / "other.sock").string()},
      err, 20s);
  CHECK(second.code == 1);
  const auto said = take_err(err);
  CHECK_THAT(said, Catch::Contains("state directory " + (dir / "state").string() +
                                   " is in use by `baton serve` (pid " + pid + "; lock file " +
                                   (dir / "state" / "baton.lock").string() + ")"));
  CHECK_FALSE(fs::exists(dir / "other.sock"));

  // `baton run` on the daemon's state directory is refused with the daemon's pid.
  const auto job = write_job(dir, "solo", 1, 1);
  auto run = run_baton({"run", job.string(), "--state-dir", (dir / "state").string()}, err, 20s);
  CHECK(run.code == 1);
  CHECK_THAT(take_err(err), Catch::Contains("is owned by the baton daemon (pid " + pid +
                                            "): submit the job to it with `baton submit"));
  CHECK_FALSE(fs::exists(dir / "state" / "jobs" / "solo"));
  CHECK(control_client::call(d.socket(), "GET", "/v1/health")->status == 200);
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("100 simultaneous submits get 100 distinct ids", "[integration][daemon]") {
  const auto dir = scratch("hundred");
  daemon_process d(dir);
  // Queued behind a first job that takes a while, so the daemon is busy with a worker too.
  const auto doc = json::parse(read_text(write_job(dir, "many", 1, 1)));
  std::mutex mu;
  std::vector<std::string> ids, failures;
  std::vector<std::thread> clients;
  for (int i = 0; i < 100; ++i) {
    clients.emplace_back([&] {
      auto r = control_client::call(d.socket(), "POST", "/v1/jobs",
                                    json{{"spec", doc}, {"base_dir", dir.string()}}, 30s);
      std::lock_guard g(mu);
      if (r && r->status == 201) {
        ids.push_back(r->body.at("id").get<std::string>());
      } else {
        failures.push_back(r ? r->body.dump() : r.error().message);
      }
    });
  }
  for (auto& t : clients) t.join();
  INFO(failures.size() << " failed, first: " << (failures.empty() ? "" : failures[0]));
  CHECK(failures.empty());
  std::sort(ids.begin(), ids.end());
  CHECK(ids.size() == 100);
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  auto list = control_client::call(d.socket(), "GET", "/v1/jobs");
  REQUIRE(list);
  CHECK(list->body.at("jobs").size() == 100);
  std::size_t folders = 0;
  for (const auto& e : fs::directory_iterator(dir / "state" / "jobs")) folders += e.is_directory();
  CHECK(folders == 100);
  d.signal(false);
  REQUIRE(d.wait(30s));
}

// Opens `n` connections to `socket` and holds them, idle, until the returned fds are closed.
std::vector<int> idle_connections(const fs::path& socket, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) break;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

// Every `baton list` and health call within 1 s, `rounds` times.
void owner_is_answered(const daemon_process& d, const fs::path& err, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = clock_type::now();
    auto h = control_client::call(d.socket(), "GET", "/v1/health", nullptr, 1s);
    REQUIRE(h);
    CHECK(h->status == 200);
    CHECK(clock_type::now() - t0 < 1s);
  }
  const auto t0 = clock_type::now();
  auto list = run_baton({"list", "--socket", d.socket().string()}, err);
  CHECK(list.code == 0);
  CHECK(clock_type::now() - t0 < 5s);  // a whole process start included
}

TEST_CASE("500 idle connections of the owner's uid: the owner still gets answers within 1 s",
          "[integration][daemon]") {
  // 65 idle connections once locked everyone out; 200 made clients see a raw Broken pipe.
  const auto dir = scratch("idle-same-uid");
  daemon_process d(dir);
  auto fds = idle_connections(d.socket(), 500);
  CHECK(fds.size() == 500);
  owner_is_answered(d, dir / "client.err", 10);
  for (const int fd : fds) ::close(fd);
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("500 idle connections of another uid: the owner still gets answers within 1 s",
          "[integration][daemon]") {
  if (::geteuid() != 0) BATON_SKIP("switching to another uid needs root");
  const auto dir = scratch("idle-other-uid");
  fs::permissions(dir, fs::perms::all, fs::perm_options::replace);
  daemon_process d(dir);
  fs::permissions(d.socket(), fs::perms::all, fs::perm_options::replace);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    auto held = idle_connections(d.socket(), 500);
    const char n = held.size() == 500 ? 'y' : 'n';
    if (::write(ready[1], &n, 1) != 1) ::_exit(4);
    ::pause();  // holds them until killed
    ::_exit(0);
  }
  ::close(ready[1]);
  char n = 0;
  REQUIRE(::read(ready[0], &n, 1) == 1);
  ::close(ready[0]);
  CHECK(n == 'y');
  owner_is_answered(d, dir / "client.err", 10);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("a daemon's full socket answers a clear 503, which the client prints",
          "[integration][daemon]") {
  // One slot per uid, and it is busy with a request (header in, body still coming): nothing can
  // be evicted, so a new client must get the daemon's message, not a reset or a Broken pipe.
  const auto dir = scratch("full-503");
  const auto settings = dir / "settings.json";
  std::ofstream(settings) << R"({"max_connections": 2, "max_connections_per_uid": 1})";
  daemon_process d(dir, {"--settings", settings.string()});
  // One fills the uid's slot; three more whose requests were there at once are still served
  // past the limit (up to twice max_connections): four busy ones leave no way in.
  const std::string partial = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{";
  std::vector<int> busy;
  for (int tries = 0; busy.size() < 4 && tries < 50; ++tries) {
    auto one = idle_connections(d.socket(), 1);
    REQUIRE(one.size() == 1);
    REQUIRE(::send(one[0], partial.data(), partial.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(partial.size()));
    std::this_thread::sleep_for(50ms);
    // Accepted before its bytes came, it was refused (and answered): not busy, try again.
    pollfd p{one[0], POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      ::close(one[0]);
    } else {
      busy.push_back(one[0]);
    }
  }
  REQUIRE(busy.size() == 4);
  std::this_thread::sleep_for(200ms);
  const auto err = dir / "client.err";
  auto list = run_baton({"list", "--socket", d.socket().string()}, err);
  CHECK(list.code == 1);
  const auto said = take_err(err);
  CHECK_THAT(said, Catch::Contains("baton: too many connections from uid " +
                                   std::to_string(::geteuid()) + " (limit 1 per user); try again"));
  CHECK_THAT(said, !Catch::Contains("Broken pipe") && !Catch::Contains("reset"));
  for (const int fd : busy) ::close(fd);
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("validate and submit refuse jobs past the machine's limits, naming the field",
          "[integration][daemon]") {
  const auto dir = scratch("limits");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();
  const auto job = [&](const std::string& name, const std::function<void(json&)>& change) {
    auto doc = json::parse(read_text(write_job(dir, name, 1, 1)));
    change(doc);
    std::ofstream(dir / (name + ".json")) << doc.dump(2);
    return (dir / (name + ".json")).string();
  };
  struct row {
    std::string file, expected;
  };
  fs::create_directories(dir / "folder.csv");
  const std::vector<row> rows = {
      {job("threads", [](json& j) { j["training"]["threads"] = 1'000'000; }),
       "training.threads: at most "},
      {job("units",
           [](json& j) {
             j["model"]["layers"] = {{{"units", 1'000'000'000}, {"activation", "relu"}},
                                     {{"units", 1}, {"activation", "sigmoid"}}};
           }),
       "model.layers[0].units: the job needs at least "},
      {job("epochs", [](json& j) { j["training"]["epochs"] = 1e18; }),
       "training.epochs: expected a positive integer no larger than 1000000000000"},
      {job("folder",
           [](json& j) {
             j["data"] = {{"type", "csv"}, {"path", "folder.csv"}};
           }),
       "data.path: expected a regular file, got a folder: " + (dir / "folder.csv").string()},
  };
  for (const auto& r : rows) {
    INFO(r.file);
    auto v = run_baton({"validate", r.file}, err);
    CHECK(v.code == 2);
    CHECK_THAT(take_err(err), Catch::Contains(r.expected));
    auto s = run_baton({"submit", r.file, "--socket", sock}, err);
    CHECK(s.code == 2);
    CHECK_THAT(take_err(err), Catch::Contains(r.expected));
  }
  // 1e18 where an integer is documented is an integer now (seed: up to 2^64 - 1).
  auto ok =
      run_baton({"validate", job("seed", [](json& j) { j["training"]["seed"] = 1e18; })}, err);
  CHECK(ok.code == 0);
  CHECK(control_client::call(d.socket(), "GET", "/v1/jobs")->body.at("jobs").empty());
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE(
    "cancel stops a command worker with the protocol stop, and kills one that ignores it "
    "after stop_grace_ms",
    "[integration][daemon]") {
  const auto dir = scratch("cancel-grace");
  const auto err = dir / "client.err";
  daemon_process d(dir, {"--max-workers", "2"});
  const auto sock = d.socket().string();
  // The example trainer obeys `stop`: it checkpoints and exits 3, never killed.
  const auto polite = trim(
      run_baton({"submit", write_job(dir, "polite", 200, 200, 400).string(), "--socket", sock}, err)
          .out);
  // A deaf worker: says hello, reports progress, never reads stdin.
  const auto deaf_py = dir / "deaf.py";
  std::ofstream(deaf_py) << R"(import json, os, sys, time
print(json.dumps({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "deaf"}), flush=True)
step = 0
while True:
    step += 1
    print(json.dumps({"type": "progress", "step": step, "total_steps": 1000000, "epoch": 0,
                      "loss": 1.0, "metrics": {}, "samples_per_sec": 1.0}), flush=True)
    time.sleep(0.05)
)";
  const json deaf_doc = {
      {"name", "deaf"},
      {"worker", {{"command", {python(), deaf_py.string()}}, {"stop_grace_ms", 1500}}},
      {"memory", {{"poll_ms", 50}}}};
  std::ofstream(dir / "deaf.json") << deaf_doc.dump(2);
  const auto deaf =
      trim(run_baton({"submit", (dir / "deaf.json").string(), "--socket", sock}, err).out);
  d.poll(polite, [](const json& s) { return s.at("step").get<int>() >= 3; });
  d.poll(deaf, [](const json& s) { return s.at("step").get<int>() >= 3; });

  CHECK(run_baton({"cancel", polite, "--socket", sock}, err).code == 0);
  const auto asked = clock_type::now();
  CHECK(run_baton({"cancel", deaf, "--socket", sock}, err).code == 0);
  const auto p = d.poll(polite, [](const json& s) { return s.at("state") == "cancelled"; });
  CHECK(p.at("shards")[0].at("cause") == "cancelled");
  CHECK(p.at("checkpoint_step").get<int>() >= 3);  // it checkpointed on the stop
  // The deaf one is still running inside its grace, then killed.
  std::this_thread::sleep_for(500ms);
  CHECK(d.status(deaf).at("state") == "running");
  const auto s = d.poll(deaf, [](const json& s) { return s.at("state") == "cancelled"; });
  CHECK(clock_type::now() - asked >= 1400ms);
  CHECK(s.at("shards")[0].at("cause") == "cancelled");
  INFO(d.log());
  d.signal(false);
  REQUIRE(d.wait(10s));
}

TEST_CASE("a status poller at 10 Hz across many shard starts never errors",
          "[integration][daemon]") {
  // `baton status` once died at shard starts on fields that were null for a moment (live.loss,
  // the leak rate). Poll as a user's watch loop would, text and JSON in turn, through thirty
  // worker starts, and every answer must be a whole status.
  const auto dir = scratch("poller");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();
  // 30 one-epoch shards: a shard of this job takes about 150 ms, one after another at once.
  auto sub = run_baton({"submit", write_job(dir, "poll", 30, 1).string(), "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto id = trim(sub.out);
  int polls = 0;
  std::size_t last_shards = 0;
  int shard_counts_seen = 0;
  std::string state;
  const auto deadline = clock_type::now() + 90s;
  while (state != "completed" && clock_type::now() < deadline) {
    const auto next = clock_type::now() + 100ms;
    auto text = run_baton({"status", id, "--socket", sock}, err);
    INFO(read_text(err));
    REQUIRE(text.code == 0);
    REQUIRE_THAT(text.out, Catch::StartsWith("job " + id + " (poll): "));
    auto js = run_baton({"status", id, "--json", "--socket", sock}, err);
    REQUIRE(js.code == 0);
    const auto s = json::parse(js.out);
    state = s.at("state").get<std::string>();
    if (s.at("shards").size() != last_shards) {
      last_shards = s.at("shards").size();
      ++shard_counts_seen;
    }
    polls += 2;
    std::this_thread::sleep_until(next);
  }
  INFO(d.log());
  CHECK(state == "completed");
  CHECK(last_shards >= 30);
  // The precondition: the poller really was there while workers started, not only at the end.
  CHECK(shard_counts_seen >= 6);
  CHECK(polls >= 40);
}

TEST_CASE("submit --set, rm, rm --force, resume of a cancelled job and prune through the CLI",
          "[integration][daemon]") {
  const auto dir = scratch("lifecycle");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto sock = d.socket().string();
  const auto job = write_job(dir, "life", 200, 200, 400).string();  // about 8 s of steps

  // A bad --set is refused before anything is sent, naming the argument and the field.
  auto bad = run_baton({"submit", job, "--set", "training.batch_size=big", "--socket", sock}, err);
  CHECK(bad.code == 2);
  CHECK_THAT(take_err(err), Catch::Contains("training.batch_size is a number; 'big' is not JSON"));
  bad = run_baton({"submit", job, "--set", "training.batch_size=-1", "--socket", sock}, err);
  CHECK(bad.code == 2);
  CHECK_THAT(take_err(err), Catch::Contains("training.batch_size: "));

  // One epoch instead of 200: the override is what runs.
  auto sub = run_baton(
      {"submit", job, "--set", "training.epochs=1", "--set", "shard.epochs=1", "--socket", sock},
      err);
  REQUIRE(sub.code == 0);
  const auto short_id = trim(sub.out);
  REQUIRE(run_baton({"wait", short_id, "--socket", sock}, err).code == 0);
  CHECK(json::parse(run_baton({"status", short_id, "--json", "--socket", sock}, err).out)
            .at("total_steps") == 8);

  sub = run_baton({"submit", job, "--socket", sock}, err);
  REQUIRE(sub.code == 0);
  const auto long_id = trim(sub.out);
  d.poll(long_id, [](const json& s) { return s.at("state") == "running"; });
  auto rm = run_baton({"rm", long_id, "--socket", sock}, err);
  CHECK(rm.code == 1);
  CHECK_THAT(take_err(err),
             Catch::Contains("is running; cancel it first, or remove it with --force"));
  REQUIRE(run_baton({"cancel", long_id, "--socket", sock}, err).code == 0);
  d.poll(long_id, [](const json& s) { return s.at("state") == "cancelled"; });
  // Cancelled is not the end: resume runs it again from its checkpoint.
  REQUIRE(run_baton({"resume", long_id, "--socket", sock}, err).code == 0);
  d.poll(long_id, [](const json& s) { return s.at("state") == "running"; });
  rm = run_baton({"rm", long_id, "--force", "--socket", sock}, err);
  CHECK(rm.code == 0);
  CHECK_THAT(rm.out, Catch::Contains("cancelling; it is removed once its worker has stopped"));
  const auto gone_by = clock_type::now() + 20s;
  while (run_baton({"status", long_id, "--socket", sock}, err).code == 0 &&
         clock_type::now() < gone_by) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK_THAT(take_err(err), Catch::Contains("no job '" + long_id + "'"));
  CHECK_FALSE(fs::exists(dir / "state" / "jobs" / long_id));

  auto dry = run_baton({"prune", "--dry-run", "--socket", sock}, err);
  CHECK(dry.code == 0);
  CHECK(trim(dry.out) == "would remove " + short_id);
  CHECK(run_baton({"prune", "--older-than", "1d", "--socket", sock}, err).out ==
        "nothing to prune\n");
  auto bad_age = run_baton({"prune", "--older-than", "7", "--socket", sock}, err);
  CHECK(bad_age.code == 64);
  CHECK_THAT(take_err(err), Catch::Contains("expected a number and a unit"));
  auto pruned = run_baton({"prune", "--state", "completed", "--socket", sock}, err);
  CHECK(pruned.code == 0);
  CHECK(trim(pruned.out) == "removed " + short_id);
  CHECK(trim(run_baton({"list", "--socket", sock}, err).out) == "no jobs");
}

}  // namespace daemon_test
