#include "supervisor/metrics_text.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include "os/mem_env.h"
#include "os/system.h"
#include "support/run_process.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    if (l == line) return true;
  }
  return false;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// A running leaky job with a history, and a finished one at rest.
struct two_jobs {
  baton::os::mem_env files;
  job_record running_rec;
  job_record done_rec;
  live_status live;
  std::optional<job_history> history;
  metrics_snapshot snap;

  two_jobs() {
    running_rec.id = "leaky-1";
    running_rec.state = job_state::running;
    running_rec.checkpoint_step = 40;
    running_rec.total_steps = 100;
    running_rec.metrics = {{"loss", 0.25}, {"accuracy", 0.9}};
    running_rec.exits_by_cause = {{"memory_soft", 3}, {"crashed", 1}, {"completed", 2}};
    shard_record s;
    s.index = 0;
    s.peak_rss_bytes = 300 << 20;
    for (int i = 0; i < 10; ++i) add_rss_point(s, {i * 100, (100 + i) << 20, 40 + i});
    running_rec.shards.push_back(s);
    live.pid = 4242;
    live.step = 49;
    live.rss_bytes = 109 << 20;

    done_rec.id = "we\"ird\\id\nx";  // not a valid job id, but the escaping must hold anyway
    done_rec.state = job_state::completed;
    done_rec.checkpoint_step = 10;
    done_rec.exits_by_cause = {{"stopped", 1}, {"cancelled", 1}};

    REQUIRE(files.create_dirs("/j"));
    auto h = job_history::open(files, "/j/history.jsonl");
    REQUIRE(h);
    history.emplace(std::move(*h));
    REQUIRE(history->add_event(1'000'000, history_event_kind::checkpoint, 4242, 0, 40));

    snap.now_ms = 1'002'500;
    snap.uptime_seconds = 12.5;
    snap.daemon_rss_bytes = 9 << 20;
    snap.jobs.push_back({&running_rec, &live, &*history, 256, 512});
    snap.jobs.push_back({&done_rec, nullptr, nullptr, std::nullopt, std::nullopt});
  }
};

}  // namespace

TEST_CASE("metrics: every family has HELP and TYPE, and the samples are the job's figures",
          "[unit][metrics_text]") {
  two_jobs f;
  const auto text = render_metrics(f.snap);
  CHECK(has_line(text, "# TYPE baton_daemon_uptime_seconds gauge"));
  CHECK(has_line(text, "baton_daemon_uptime_seconds 12.5"));
  CHECK(has_line(text, "baton_daemon_resident_memory_bytes 9437184"));
  CHECK(has_line(text, "baton_job_worker_resident_memory_bytes{job_id=\"leaky-1\"} 114294784"));
  CHECK(has_line(text, "baton_job_worker_pid{job_id=\"leaky-1\"} 4242"));
  CHECK(has_line(text, "baton_job_memory_soft_limit_bytes{job_id=\"leaky-1\"} 268435456"));
  CHECK(has_line(text, "baton_job_memory_hard_limit_bytes{job_id=\"leaky-1\"} 536870912"));
  CHECK(has_line(text, "baton_job_steps_done{job_id=\"leaky-1\"} 49"));
  CHECK(has_line(text, "baton_job_steps_target{job_id=\"leaky-1\"} 100"));
  CHECK(has_line(text, "baton_job_loss{job_id=\"leaky-1\"} 0.25"));
  CHECK(has_line(text, "baton_job_metric{job_id=\"leaky-1\",metric=\"accuracy\"} 0.9"));
  CHECK(has_line(text, "baton_job_checkpoint_age_seconds{job_id=\"leaky-1\"} 2.5"));
  CHECK(has_line(text, "baton_job_peak_resident_memory_bytes{job_id=\"leaky-1\"} 314572800"));
  // 1 MiB per step over the ten samples.
  CHECK(has_line(text, "baton_job_worker_leak_bytes_per_step{job_id=\"leaky-1\"} 1048576"));
  CHECK(has_line(text, "# TYPE baton_job_restarts_total counter"));
  CHECK(has_line(text, "baton_job_restarts_total{job_id=\"leaky-1\",cause=\"recycle\"} 3"));
  CHECK(has_line(text, "baton_job_restarts_total{job_id=\"leaky-1\",cause=\"failure\"} 1"));
  CHECK(has_line(text, "baton_job_restarts_total{job_id=\"leaky-1\",cause=\"user\"} 0"));
  CHECK(has_line(text, "baton_job_state{job_id=\"leaky-1\",state=\"running\"} 1"));
  CHECK(has_line(text, "baton_job_state{job_id=\"leaky-1\",state=\"backoff\"} 0"));
  CHECK(count_of(text, "baton_job_state{job_id=\"leaky-1\"") == 8);  // one-hot over every state

  // A job at rest has no worker figures, and its odd id is escaped.
  const std::string odd = "job_id=\"we\\\"ird\\\\id\\nx\"";
  CHECK(has_line(text, "baton_job_state{" + odd + ",state=\"completed\"} 1"));
  CHECK(has_line(text, "baton_job_restarts_total{" + odd + ",cause=\"user\"} 1"));
  CHECK(has_line(text, "baton_job_steps_done{" + odd + "} 10"));
  CHECK(text.find("baton_job_worker_pid{" + odd) == std::string::npos);
  CHECK(text.find("baton_job_loss{" + odd) == std::string::npos);

  // Every family once, its samples together, each sample line under its own family.
  std::istringstream in(text);
  std::string line, current;
  std::map<std::string, int> helps;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      current = line.substr(7, line.find(' ', 7) - 7);
      ++helps[current];
    } else if (line.rfind("# TYPE ", 0) != 0) {
      CHECK(line.rfind(current, 0) == 0);
    }
  }
  for (const auto& [name, n] : helps) CHECK(n == 1);
  CHECK(text.back() == '\n');
}

TEST_CASE("metrics: label values escape backslash, quote and newline", "[unit][metrics_text]") {
  CHECK(escape_label_value("plain") == "plain");
  CHECK(escape_label_value("a\"b") == "a\\\"b");
  CHECK(escape_label_value("a\\b") == "a\\\\b");
  CHECK(escape_label_value("a\nb") == "a\\nb");
}

TEST_CASE("metrics: a daemon with no job still answers uptime only", "[unit][metrics_text]") {
  metrics_snapshot s;
  s.uptime_seconds = 1;
  const auto text = render_metrics(s);
  CHECK(text ==
        "# HELP baton_daemon_uptime_seconds Seconds since the daemon started.\n"
        "# TYPE baton_daemon_uptime_seconds gauge\n"
        "baton_daemon_uptime_seconds 1\n");
}

#ifndef _WIN32
// promtool (Debian's prometheus package, which scripts/setup.sh installs) checks the format and
// lints the names: units, _total on counters only, HELP on every family. A missing promtool fails.
TEST_CASE("metrics: promtool check metrics passes on the output", "[unit][metrics_text]") {
  const fs::path promtool = "/usr/bin/promtool";
  INFO("promtool comes with Debian's prometheus package: run scripts/setup.sh");
  REQUIRE(fs::exists(promtool));
  two_jobs f;
  const auto dir =
      fs::temp_directory_path() / ("baton-metrics-" + std::to_string(baton::os::current_pid()));
  fs::create_directories(dir);
  const auto input = dir / "metrics.txt";
  const auto errors = dir / "promtool.err";
  {
    std::ofstream out(input, std::ios::binary);
    out << render_metrics(f.snap);
  }
  const auto r = baton::test::run_process(
      {"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", promtool.string(), input.string()},
      {}, errors);
  std::ifstream err_in(errors);
  const std::string err((std::istreambuf_iterator<char>(err_in)), {});
  INFO("promtool said: " << r.out << err);
  CHECK(r.status.success());
  fs::remove_all(dir);
}
#endif
