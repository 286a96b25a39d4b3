// `baton serve` on Windows (natively or under wine) with its control API on loopback TCP: the
// daemon writes the endpoint file, the `baton` client verbs find it through --socket, a wrong
// token gets 401, and a job submitted through the API runs on baton-worker to completion.
// Windows-only: tests/CMakeLists.txt builds *_windows_test.cpp for WIN32 alone.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "os/env.h"
#include "os/process.h"
#include "supervisor/control_client.h"
#include "supervisor/control_endpoint.h"
#include "support/private_file_checks.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace baton::supervisor;
namespace os = baton::os;
using clock_type = std::chrono::steady_clock;

namespace {

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-win-daemon-" + name);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Two small shards on the built-in worker: a few seconds under wine.
fs::path write_job(const fs::path& dir) {
  const json doc = {
      {"name", "win"},
      {"data", {{"type", "synthetic"}, {"samples", 256}, {"features", 8}, {"seed", 3}}},
      {"model",
       {{"layers",
         {{{"units", 16}, {"activation", "relu"}}, {{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training", {{"batch_size", 64}, {"epochs", 2}, {"seed", 1}, {"threads", 1}}},
      {"shard", {{"epochs", 1}}},
      {"memory", {{"poll_ms", 50}}}};
  const auto file = dir / "job.json";
  std::ofstream(file) << doc.dump(2);
  return file;
}

// The daemon as a child process; killed at the end of the test (wine cannot deliver a console
// stop event to it, and a killed daemon is the case the stale endpoint check exists for).
class daemon_process {
 public:
  explicit daemon_process(const fs::path& dir)
      : endpoint_file_(dir / "run" / "control-endpoint.json"), log_(dir / "daemon.log") {
    baton::os::spawn_options o;
    o.argv = {BATON_EXE,     "serve",
              "--state-dir", (dir / "state").string(),
              "--socket",    endpoint_file_.string(),
              "--worker",    BATON_WORKER_EXE};
    o.stderr_log = log_;
    auto p = baton::os::spawn(io_, o);
    REQUIRE(p);
    proc_ = std::move(*p);
    proc_->async_read_lines([](const boost::system::error_code&, std::string_view) {});
    proc_->async_wait(
        [this](const boost::system::error_code&, baton::os::exit_status st) { exited_ = st; });
    const auto deadline = clock_type::now() + 60s;
    while (clock_type::now() < deadline && !exited_) {
      if (fs::exists(endpoint_file_)) {
        auto h = control_client::call(endpoint_file_, "GET", "/v1/health", nullptr, 2s);
        if (h && h->status == 200) return;
      }
      io_.restart();
      io_.run_for(100ms);
    }
    FAIL("daemon did not come up:\n" << read_text(log_));
  }
  ~daemon_process() {
    if (!exited_) (void)proc_->signal_group(baton::os::group_signal::kill);
    const auto deadline = clock_type::now() + 10s;
    while (!exited_ && clock_type::now() < deadline) {
      io_.restart();
      io_.run_for(50ms);
    }
  }
  const fs::path& endpoint_file() const { return endpoint_file_; }
  std::string log() const { return read_text(log_); }

 private:
  fs::path endpoint_file_, log_;
  boost::asio::io_context io_;
  std::unique_ptr<baton::os::process> proc_;
  std::optional<baton::os::exit_status> exited_;
};

baton::test::process_output baton_cli(std::vector<std::string> args, const fs::path& err) {
  args.insert(args.begin(), BATON_EXE);
  return baton::test::run_process(std::move(args), {}, err, 180s);
}

}  // namespace

TEST_CASE("windows daemon: endpoint file, 401, submit and wait through the client",
          "[integration][daemon][windows]") {
  const auto dir = scratch("control");
  const auto err = dir / "client.err";
  daemon_process d(dir);
  const auto file = d.endpoint_file().string();
  CHECK_THAT(d.log(), Catch::Contains("serving on 127.0.0.1:") && Catch::Contains(file));

  auto endpoint = load_control_endpoint(os::env::default_env(), d.endpoint_file());
  REQUIRE(endpoint);
  CHECK(endpoint->address == "127.0.0.1");
  CHECK(endpoint->port != 0);
  baton::test::check_private_file_access(d.endpoint_file());

  auto list = baton_cli({"list", "--socket", file}, err);
  INFO(read_text(err));
  REQUIRE(list.status.success());
  CHECK(list.out == "no jobs\n");

  auto wrong = *endpoint;
  wrong.token.front() = wrong.token.front() == 'a' ? 'b' : 'a';
  auto denied = control_client::call_tcp(wrong, "test", "GET", "/v1/jobs", nullptr, 10s);
  REQUIRE(denied);
  CHECK(denied->status == 401);
  CHECK_THAT(denied->body.value("error", ""), Catch::Contains("wrong control token"));

  const auto job = write_job(dir);
  auto submit = baton_cli({"submit", job.string(), "--socket", file}, err);
  INFO(read_text(err) << "\ndaemon log:\n" << d.log());
  REQUIRE(submit.status.success());
  std::string id = submit.out;
  while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
  CHECK(id == "win-1");

  auto wait = baton_cli({"wait", id, "--socket", file, "--timeout", "150"}, err);
  INFO(read_text(err) << "\ndaemon log:\n" << d.log());
  CHECK(wait.status.success());
  CHECK(wait.out == "job win-1: completed\n");
  auto status = baton_cli({"status", id, "--json", "--socket", file}, err);
  REQUIRE(status.status.success());
  const auto s = json::parse(status.out);
  CHECK(s.at("state") == "completed");
  CHECK(s.at("shards").size() == 2);
}

TEST_CASE("windows client: a missing endpoint file says the daemon is not running",
          "[integration][daemon][windows]") {
  const auto dir = scratch("missing");
  const auto err = dir / "client.err";
  auto list = baton_cli({"list", "--socket", (dir / "none.json").string()}, err);
  CHECK_FALSE(list.status.success());
  CHECK_THAT(read_text(err),
             Catch::Contains("none.json") && Catch::Contains("(is `baton serve` running?)"));
}
