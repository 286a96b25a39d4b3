// `baton serve --service` under the real Service Control Manager (wine's services.exe under
// ./test.sh --windows), with jobs sent over the Windows control API (loopback TCP). Wine ends a
// service along with the session that started it, so this test process does everything itself: it
// spawns `baton service install|uninstall` and `sc.exe start|query|stop` as children (argv vectors,
// no shell), which all share its session. Windows-only: tests/CMakeLists.txt builds
// tests/integration/*_windows_test.cpp for WIN32.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/system.h"
#include "support/run_process.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using baton::test::run_process;

// Named, not anonymous: tests/ builds in unity batches, where the helpers of several files
// share one translation unit.
namespace service_windows_test {

constexpr unsigned stopped = 1, running = 4;

fs::path scratch(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-service-" + name);
}

using baton::test::read_text;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string sc_exe() {
  const auto root = baton::os::get_env("SystemRoot");
  return (fs::path(root && !root->empty() ? *root : "C:\\windows") / "system32" / "sc.exe")
      .string();
}

struct run_result {
  int code = -1;
  std::string out;
};

run_result run(std::vector<std::string> argv, const fs::path& err_log = {}) {
  const auto r = run_process(std::move(argv), {}, err_log, 120s);
  REQUIRE_FALSE(r.timed_out);
  return {r.status.how == baton::os::exit_status::kind::exited ? r.status.code : -1, r.out};
}

run_result run_baton(std::vector<std::string> args, const fs::path& err_log) {
  args.insert(args.begin(), BATON_EXE);
  return run(std::move(args), err_log);
}

// `sc query NAME`: "STATE : 4  RUNNING", "WIN32_EXIT_CODE : 1066 (0x42a)",
// "SERVICE_EXIT_CODE : 2 (0x2)". Wine's sc prints the same fields as Windows'.
struct sc_status {
  bool found = false;
  unsigned state = 0, win32_exit = 0, service_exit = 0;
  std::string text;
};

unsigned field(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return 0;
  const auto colon = text.find(':', at);
  return colon == std::string::npos
             ? 0u
             : static_cast<unsigned>(std::stoul(text.substr(colon + 1), nullptr, 0));
}

sc_status sc_query(const std::string& name) {
  const auto r = run({sc_exe(), "query", name});
  sc_status s;
  s.text = r.out;
  s.found = r.code == 0 && r.out.find("STATE") != std::string::npos;
  if (s.found) {
    s.state = field(r.out, "STATE");
    s.win32_exit = field(r.out, "WIN32_EXIT_CODE");
    s.service_exit = field(r.out, "SERVICE_EXIT_CODE");
  }
  return s;
}

template <class Pred>
sc_status wait_until(const std::string& name, Pred done, std::chrono::seconds limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  sc_status s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = sc_query(name);
    if (!s.found || done(s)) return s;
    std::this_thread::sleep_for(200ms);
  }
  return s;
}

sc_status wait_for_state(const std::string& name, unsigned state) {
  return wait_until(name, [state](const sc_status& s) { return s.state == state; });
}

// Removes the service whatever happens to the test; the SCM outlives a failed REQUIRE.
class installed_service {
 public:
  installed_service(std::string name, fs::path err_log)
      : name_(std::move(name)), err_log_(std::move(err_log)) {}
  ~installed_service() {
    if (!installed_) return;
    const auto r =
        run_process({BATON_EXE, "service", "uninstall", "--name", name_, "--timeout", "60"}, {},
                    err_log_, 120s);
    if (r.status.code != 0 || r.timed_out) {
      (void)run_process({sc_exe(), "stop", name_});
      (void)run_process({sc_exe(), "delete", name_});
    }
  }
  void mark_installed() { installed_ = true; }
  void mark_removed() { installed_ = false; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  fs::path err_log_;
  bool installed_ = false;
};

std::string unique_name(const std::string& what) {
  return "baton-test-" + what + "-" + std::to_string(baton::os::current_pid());
}

void write_settings(const fs::path& file, const json& doc) { std::ofstream(file) << doc.dump(2); }

// A job for the built-in worker: 2048 samples, batch 64 (32 steps an epoch), two epochs a shard,
// one thread. `epochs` and `units` set how long it runs.
fs::path write_job(const fs::path& dir, const std::string& name, int epochs, int units) {
  const json doc = {
      {"name", name},
      {"data", {{"type", "synthetic"}, {"samples", 2048}, {"features", 16}, {"seed", 5}}},
      {"model",
       {{"layers",
         {{{"units", units}, {"activation", "relu"}},
          {{"units", units}, {"activation", "relu"}},
          {{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training",
       {{"loss", "binary_crossentropy"},
        {"batch_size", 64},
        {"epochs", epochs},
        {"seed", 9},
        {"threads", 1}}},
      {"shard", {{"epochs", 2}}},
      {"memory", {{"poll_ms", 50}}}};
  const auto file = dir / (name + ".json");
  std::ofstream(file) << doc.dump(2);
  return file;
}

TEST_CASE("baton serve --service: install, start, run jobs, drain on stop, resume, uninstall",
          "[integration][service]") {
  const auto dir = scratch("lifecycle");
  const auto err = dir / "stderr.log";
  const auto log = dir / "service.log";
  const auto settings = dir / "settings.json";
  // Its own endpoint file, not the machine-wide default another daemon may own.
  const auto endpoint = (dir / "control-endpoint.json").string();
  write_settings(
      settings,
      {{"state_dir", (dir / "state").string()}, {"socket", endpoint}, {"log_level", "debug"}});
  installed_service svc(unique_name("life"), err);

  const auto inst =
      run_baton({"service", "install", "--name", svc.name(), "--settings", settings.string(),
                 "--log-file", log.string(), "--worker", BATON_WORKER_EXE},
                err);
  INFO("stderr: " << read_text(err));
  REQUIRE(inst.code == 0);
  svc.mark_installed();
  CHECK(inst.out.find("installed service " + svc.name()) != std::string::npos);
  CHECK(inst.out.find("serve --service --settings") != std::string::npos);

  // A second install under the same name is refused and leaves the first alone.
  const auto again =
      run_baton({"service", "install", "--name", svc.name(), "--settings", settings.string()}, err);
  CHECK(again.code == 1);
  CHECK(read_text(err).find("exists already") != std::string::npos);

  const auto before = sc_query(svc.name());
  REQUIRE(before.found);
  CHECK(before.state == stopped);

  const auto start = run({sc_exe(), "start", svc.name()});
  INFO("sc start: " << start.out);
  CHECK(start.code == 0);
  const auto up = wait_for_state(svc.name(), running);
  INFO("sc query: " << up.text << "\nservice log:\n" << read_text(log));
  REQUIRE(up.state == running);
  const auto log_running = read_text(log);
  CHECK(log_running.find("running as Windows service " + svc.name()) != std::string::npos);
  CHECK(log_running.find("serving on") != std::string::npos);

  // A parameter change re-reads the settings file, as SIGHUP does under systemd. (Wine's sc.exe
  // has no `control` verb, so `baton service reload` sends it.)
  write_settings(settings, {{"state_dir", (dir / "state").string()},
                            {"socket", endpoint},
                            {"log_level", "debug"},
                            {"max_workers", 2}});
  const auto reload = run_baton({"service", "reload", "--name", svc.name()}, err);
  INFO("stderr: " << read_text(err));
  CHECK(reload.code == 0);
  bool reloaded = false;
  for (int i = 0; i < 100 && !reloaded; ++i) {
    reloaded = read_text(log).find("reloaded settings: max_workers 2") != std::string::npos;
    if (!reloaded) std::this_thread::sleep_for(100ms);
  }
  CHECK(reloaded);
  CHECK(sc_query(svc.name()).state == running);

  // A job through the control API, run to completion by the service's worker.
  const auto submit = [&](const fs::path& job) {
    const auto r = run_baton({"submit", "--socket", endpoint, "--json", job.string()}, err);
    INFO("submit stderr: " << read_text(err));
    REQUIRE(r.code == 0);
    return json::parse(r.out).at("id").get<std::string>();
  };
  const auto wait_job = [&](const std::string& id) {
    const auto r =
        run_baton({"wait", id, "--socket", endpoint, "--timeout", "300"}, dir / "wait-stderr.log");
    INFO("wait: " << r.out << read_text(dir / "wait-stderr.log") << "\nservice log:\n"
                  << read_text(log));
    CHECK(r.code == 0);
    CHECK(r.out.find("job " + id + ": completed") != std::string::npos);
  };
  const auto quick = submit(write_job(dir, "quick", 2, 16));
  wait_job(quick);

  // A longer one, stopped mid-run: the SCM's stop drains it like SIGTERM (the worker writes a
  // checkpoint, the job is saved as queued) and the next start resumes it.
  const auto long_id = submit(write_job(dir, "long", 24, 256));
  bool mid_run = false;
  for (int i = 0; i < 600 && !mid_run; ++i) {
    const auto st = run_baton({"status", long_id, "--socket", endpoint, "--json"}, err);
    if (st.code == 0) {
      const auto j = json::parse(st.out);
      mid_run = j.value("state", "") == "running" && j.at("live").is_object() &&
                j.at("live").value("step", 0) > 0;
      REQUIRE(j.value("state", "") != "completed");  // too fast to stop: make the job longer
    }
    if (!mid_run) std::this_thread::sleep_for(100ms);
  }
  REQUIRE(mid_run);

  const auto stop = run({sc_exe(), "stop", svc.name()});
  INFO("sc stop: " << stop.out);
  CHECK(stop.code == 0);
  const auto down = wait_for_state(svc.name(), stopped);
  INFO("sc query: " << down.text << "\nservice log:\n" << read_text(log));
  REQUIRE(down.state == stopped);
  CHECK(down.win32_exit == 0);
  const auto log_stopped = read_text(log);
  CHECK(log_stopped.find("the Service Control Manager asks the daemon to stop") !=
        std::string::npos);
  CHECK(log_stopped.find("shutting down: 1 running job(s)") != std::string::npos);
  CHECK(log_stopped.find("job " + long_id + ": stopped at checkpoint step") != std::string::npos);
  CHECK(log_stopped.find("info: stopped") != std::string::npos);

  REQUIRE(run({sc_exe(), "start", svc.name()}).code == 0);
  REQUIRE(wait_for_state(svc.name(), running).state == running);
  wait_job(long_id);
  CHECK(read_text(log).find("recovered 2 jobs") != std::string::npos);

  // Uninstalling a running service stops it first (the same drain) and waits for STOPPED.
  const auto un = run_baton({"service", "uninstall", "--name", svc.name()}, err);
  INFO("uninstall: " << un.out << read_text(err));
  CHECK(un.code == 0);
  CHECK(un.out.find("stopping service " + svc.name()) != std::string::npos);
  CHECK(un.out.find("removed service " + svc.name()) != std::string::npos);
  CHECK(count(read_text(log), "info: stopped\n") == 2);
  svc.mark_removed();
  CHECK_FALSE(sc_query(svc.name()).found);
}

TEST_CASE("a service that cannot start stops with a service-specific exit code and says why",
          "[integration][service]") {
  const auto dir = scratch("broken");
  const auto err = dir / "stderr.log";
  const auto log = dir / "service.log";
  const auto settings = dir / "settings.json";
  write_settings(settings, {{"state_dir", (dir / "state").string()}});
  installed_service svc(unique_name("broken"), err);
  const auto inst = run_baton({"service", "install", "--name", svc.name(), "--settings",
                               settings.string(), "--log-file", log.string()},
                              err);
  INFO("stderr: " << read_text(err));
  REQUIRE(inst.code == 0);
  svc.mark_installed();

  // Broken after install (which checked it): the service finds out at start.
  write_settings(settings, {{"state_dir", (dir / "state").string()}, {"max_workers", 0}});
  (void)run({sc_exe(), "start", svc.name()});
  // Right after `sc start` the service may not have left STOPPED yet: wait for its exit code.
  const auto down = wait_until(
      svc.name(), [](const sc_status& s) { return s.state == stopped && s.win32_exit != 0; });
  INFO("sc query: " << down.text << "\nservice log:\n" << read_text(log));
  REQUIRE(down.found);
  CHECK(down.state == stopped);
  CHECK(down.win32_exit == 1066);  // ERROR_SERVICE_SPECIFIC_ERROR
  CHECK(down.service_exit == 2);   // baton's exit_invalid
  CHECK(read_text(log).find("max_workers") != std::string::npos);
}

TEST_CASE("a slow drain keeps the service STOP_PENDING with an advancing checkpoint",
          "[integration][service]") {
  const auto dir = scratch("slow-drain");
  const auto err = dir / "stderr.log";
  const auto log = dir / "service.log";
  const auto settings = dir / "settings.json";
  const auto endpoint = (dir / "control-endpoint.json").string();
  write_settings(settings, {{"state_dir", (dir / "state").string()}, {"socket", endpoint}});
  installed_service svc(unique_name("drain"), err);
  const auto inst =
      run_baton({"service", "install", "--name", svc.name(), "--settings", settings.string(),
                 "--log-file", log.string(), "--worker", BATON_WORKER_EXE},
                err);
  INFO("stderr: " << read_text(err));
  REQUIRE(inst.code == 0);
  svc.mark_installed();
  REQUIRE(run({sc_exe(), "start", svc.name()}).code == 0);
  REQUIRE(wait_for_state(svc.name(), running).state == running);

  // A worker that hangs at step 3 and ignores the stop request: the daemon waits out its 12 s
  // grace before killing it, and all that time the SCM must hear that the stop progresses.
  auto job = json::parse(read_text(write_job(dir, "hang", 4, 16)));
  job["debug"] = {{"hang_at_step", 3}};
  job["worker"] = {{"stop_grace_ms", 12000}};
  std::ofstream(dir / "hang.json") << job.dump(2);
  const auto sub =
      run_baton({"submit", "--socket", endpoint, "--json", (dir / "hang.json").string()}, err);
  REQUIRE(sub.code == 0);
  const auto id = json::parse(sub.out).at("id").get<std::string>();
  bool live = false;
  for (int i = 0; i < 300 && !live; ++i) {
    const auto st = run_baton({"status", id, "--socket", endpoint, "--json"}, err);
    live = st.code == 0 && json::parse(st.out).at("live").is_object();
    if (!live) std::this_thread::sleep_for(100ms);
  }
  REQUIRE(live);
  std::this_thread::sleep_for(500ms);  // let it reach the hang

  REQUIRE(run({sc_exe(), "stop", svc.name()}).code == 0);
  unsigned max_checkpoint = 0, max_wait_hint_s = 0;
  const auto start = std::chrono::steady_clock::now();
  sc_status s;
  while (std::chrono::steady_clock::now() - start < 90s) {
    s = sc_query(svc.name());
    if (!s.found || s.state == stopped) break;
    CHECK(s.state == 3);  // STOP_PENDING
    max_checkpoint = std::max(max_checkpoint, field(s.text, "CHECKPOINT"));
    max_wait_hint_s = std::max(max_wait_hint_s, field(s.text, "WAIT_HINT") / 1000);
    std::this_thread::sleep_for(250ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  INFO("sc query: " << s.text << "\nservice log:\n" << read_text(log));
  REQUIRE(s.state == stopped);
  CHECK(s.win32_exit == 0);
  CHECK(took >= 10s);  // the grace was waited out, not cut short
  // 1: the request, 2: the daemon's stopping(), 3: its first extend, then one every 5 s.
  CHECK(max_checkpoint >= 4);
  CHECK(max_wait_hint_s >= 25);  // 12 s grace (or the 10 s floor) + 15 s margin
  CHECK(read_text(log).find("job " + id + ": stopped at checkpoint step") != std::string::npos);
}

}  // namespace service_windows_test
