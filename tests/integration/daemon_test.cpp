// `baton serve` and the client verbs as real processes: the daemon is the built `baton`
// executable, its workers are the example Python trainer, and the checks go through the CLI and
// the socket exactly as a user would.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/process.h"
#include "supervisor/bad_api_requests.h"
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

namespace {

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

}  // namespace

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
  auto sub_json = run_baton({"submit", job.string(), "--json", "--socket", sock}, err);
  REQUIRE(sub_json.code == 0);
  CHECK(json::parse(sub_json.out).at("id") == "rt-2");

  auto list = run_baton({"list", "--socket", sock}, err);
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("rt-1") && Catch::Contains("rt-2"));
  auto list_json = run_baton({"list", "--json", "--socket", sock}, err);
  CHECK(json::parse(list_json.out).at("jobs").size() == 2);

  auto wait = run_baton({"wait", id, "--socket", sock}, err);
  INFO(d.log());
  CHECK(wait.code == 0);
  CHECK(trim(wait.out) == "job rt-1: completed");

  auto st = run_baton({"status", id, "--json", "--socket", sock}, err);
  REQUIRE(st.code == 0);
  const auto s = json::parse(st.out);
  CHECK(s.at("state") == "completed");
  CHECK(s.at("checkpoint_step") == 24);
  CHECK(s.at("shards").size() == 3);
  CHECK(s.at("shards")[0].at("cause") == "completed");
  auto human = run_baton({"status", id, "--socket", sock}, err);
  CHECK_THAT(human.out, Catch::Contains("job rt-1 (rt): completed"));
  CHECK_THAT(human.out, Catch::Contains("step 24/24"));
  CHECK_THAT(human.out, Catch::Contains("peak RSS"));
  CHECK_THAT(human.out, Catch::Contains("checkpoint: step 24 at "));

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
  CHECK_THAT(take_err(err), Catch::Contains("only a paused or failed job can be resumed"));
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
  CHECK(wait2.code == (d.status("rt-2").at("state") == "completed" ? 0 : 1));

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
