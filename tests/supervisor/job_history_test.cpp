#include "supervisor/job_history.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>

#include "os/mem_env.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

const fs::path dir = "/state/jobs/j1";
const fs::path file = job_history::file_in(dir);

job_history open_history(baton::os::mem_env& e, history_limits limits = {}) {
  REQUIRE(e.create_dirs(dir));
  auto h = job_history::open(e, file, limits);
  REQUIRE(h);
  return std::move(*h);
}

}  // namespace

TEST_CASE("a history of 10^6 progress reports and 10^5 RSS samples stays under 2 MiB",
          "[unit][job_history]") {
  // The stated bound: at most 8000 entries in memory and a file under 2 MiB at every moment
  // (the bounded state, about 1.1 MiB here, plus at most compact_after_bytes appended since).
  constexpr std::size_t max_entries = 8000;
  constexpr std::uint64_t max_file = 2u << 20;
  baton::os::mem_env e;
  auto h = open_history(e);
  std::uint64_t biggest_file = 0;
  std::map<std::int64_t, std::uint64_t> peak_by_pid;
  std::int64_t step = 0;
  for (int i = 0; i < 100000; ++i) {
    // Ten workers, each leaking 1 KiB per sample from 100 MiB: a sawtooth of ten teeth.
    const std::int64_t pid = 1000 + i / 10000;
    const std::uint64_t rss = (100u << 20) + static_cast<std::uint64_t>(i % 10000) * 1024;
    peak_by_pid[pid] = std::max(peak_by_pid[pid], rss);
    // Plain ifs, not REQUIRE: Catch's bookkeeping for 1.1 million assertions at -O0 was most
    // of this test's minute.
    if (auto st = h.add_rss(1'700'000'000'000 + i * 100, pid, i / 10000, step, rss); !st)
      FAIL("add_rss " << i << ": " << st.error().message);
    for (int k = 0; k < 10; ++k) {
      ++step;
      const double loss = step == 500000 ? 100.0 : 1.0 / static_cast<double>(step);
      if (auto st = h.add_progress(1'700'000'000'000 + step * 10, step, step / 1000, loss,
                                   {{"accuracy", 0.5}});
          !st)
        FAIL("add_progress " << step << ": " << st.error().message);
    }
    biggest_file = std::max(biggest_file, h.file_bytes());
  }
  INFO("entries " << h.size() << ", largest file " << biggest_file << " bytes");
  CHECK(h.size() < max_entries);
  CHECK(biggest_file < max_file);
  CHECK(e.files().at(file.generic_string()).size() == h.file_bytes());
  CHECK(h.last_seq() == 1'100'000);

  const auto p = h.page(0);
  REQUIRE(!p.progress.empty());
  // First and last report survive, and so does the one spike among a million.
  CHECK(p.progress.front().first_step == 1);
  CHECK(p.progress.back().step == 1'000'000);
  CHECK(p.progress.back().count == 1);  // the newest are at full resolution
  double worst = 0;
  std::int64_t counted = 0;
  for (const auto& x : p.progress) {
    worst = std::max(worst, x.loss_max.value_or(0));
    counted += x.count;
  }
  CHECK(worst == 100.0);
  CHECK(counted == 1'000'000);
  // Every worker keeps its own peak: its tooth of the sawtooth is there at full height.
  std::map<std::int64_t, std::uint64_t> seen;
  for (const auto& r : p.rss) seen[r.pid] = std::max(seen[r.pid], r.max_bytes);
  CHECK(seen == peak_by_pid);
  for (std::size_t i = 1; i < p.rss.size(); ++i) REQUIRE(p.rss[i - 1].seq < p.rss[i].seq);

  // The file holds what memory holds, once the pending batch is written.
  REQUIRE(h.flush());
  CHECK(e.files().at(file.generic_string()).size() == h.file_bytes());
  auto back = job_history::load(e, file);
  REQUIRE(back);
  CHECK(back->load_notes().empty());
  CHECK(to_json(back->page(0)) == to_json(p));
}

TEST_CASE("samples are written in batches of a second, events and the end at once",
          "[unit][job_history]") {
  baton::os::mem_env e;
  auto on_disk = [&] {
    auto back = job_history::load(e, file);
    REQUIRE(back);
    CHECK(back->load_notes().empty());
    return back->last_seq();
  };
  {
    auto h = open_history(e);
    REQUIRE(h.add_rss(1000, 7, 0, 0, 100));
    REQUIRE(h.add_progress(1100, 1, 0, 0.5, {}));
    REQUIRE(h.add_rss(1999, 7, 0, 1, 110));
    CHECK(on_disk() == 0);  // the batch is younger than a second
    CHECK(h.file_bytes() == 0);
    REQUIRE(h.add_progress(2000, 2, 0, 0.4, {}));
    CHECK(on_disk() == 4);  // a second old: written, all four
    REQUIRE(h.add_rss(2100, 7, 0, 2, 120));
    CHECK(on_disk() == 4);
    // An event goes out at once, with the samples before it.
    REQUIRE(h.add_event(2200, history_event_kind::recycle, 7, 0, 2, "memory_soft"));
    CHECK(on_disk() == 6);
    REQUIRE(h.add_rss(2300, 8, 1, 2, 90));
    CHECK(on_disk() == 6);
  }
  CHECK(on_disk() == 7);  // the history's end writes what was pending

  // A batch is also written once it is large, however young.
  history_limits small;
  small.flush_bytes = 1000;
  auto h = open_history(e, small);
  int written_at = 0;
  for (int i = 1; i <= 100 && written_at == 0; ++i) {
    REQUIRE(h.add_rss(5000, 9, 2, i, 1000));
    if (on_disk() > 7) written_at = i;
  }
  CHECK(written_at > 1);
  CHECK(written_at < 30);
}

TEST_CASE("the since cursor returns only newer entries and the next cursor",
          "[unit][job_history]") {
  baton::os::mem_env e;
  auto h = open_history(e);
  REQUIRE(h.add_event(10, history_event_kind::spawn, 42, 0, 0));
  REQUIRE(h.add_rss(11, 42, 0, 0, 1000));
  REQUIRE(h.add_progress(12, 5, 0, 0.9, {}));
  REQUIRE(h.add_rss(13, 42, 0, 5, 2000));

  auto all = h.page(0);
  CHECK(all.next == 4);
  CHECK(all.events.size() == 1);
  CHECK(all.rss.size() == 2);
  CHECK(all.progress.size() == 1);

  auto newer = h.page(2);
  CHECK(newer.since == 2);
  CHECK(newer.next == 4);
  CHECK(newer.events.empty());
  REQUIRE(newer.rss.size() == 1);
  CHECK(newer.rss[0].bytes == 2000);
  CHECK(newer.progress.size() == 1);

  auto none = h.page(4);
  CHECK(none.rss.empty());
  CHECK(none.progress.empty());
  CHECK(none.events.empty());
  CHECK(none.next == 4);

  REQUIRE(h.add_event(20, history_event_kind::recycle, 42, 0, 5, "memory_soft", "rss 9 > 8"));
  auto last = h.page(4);
  REQUIRE(last.events.size() == 1);
  CHECK(last.events[0].seq == 5);
  CHECK(last.events[0].cause == "memory_soft");
  const auto j = to_json(last);
  CHECK(j["next"] == 5);
  CHECK(j["events"][0]["kind"] == "recycle");
  CHECK(j["events"][0]["detail"] == "rss 9 > 8");
}

TEST_CASE("a torn last line is ignored with a note, and the file is clean after the open",
          "[unit][job_history]") {
  baton::os::mem_env e;
  {
    auto h = open_history(e);
    REQUIRE(h.add_rss(1, 7, 0, 0, 100));
    REQUIRE(h.add_progress(2, 1, 0, 0.5, {}));
  }
  auto text = e.files().at(file.generic_string());
  REQUIRE(e.put(file, text + R"({"type":"rss","seq":3,"t_ms":3,"pi)"));

  auto h = job_history::open(e, file);
  REQUIRE(h);
  REQUIRE(h->load_notes().size() == 1);
  CHECK(h->load_notes()[0].find("torn last line") != std::string::npos);
  CHECK(h->last_seq() == 2);
  CHECK(h->page(0).rss.size() == 1);
  REQUIRE(h->add_rss(4, 7, 0, 1, 200));
  REQUIRE(h->flush());

  auto again = job_history::load(e, file);
  REQUIRE(again);
  CHECK(again->load_notes().empty());
  CHECK(again->page(0).rss.size() == 2);
  CHECK(again->last_seq() == 3);
}

TEST_CASE("damaged lines are skipped with a note and never fail the load", "[unit][job_history]") {
  baton::os::mem_env e;
  REQUIRE(e.create_dirs(dir));
  REQUIRE(e.put(file,
                "{\"type\":\"rss\",\"seq\":1,\"t_ms\":1,\"pid\":3,\"shard\":0,\"step\":0,"
                "\"bytes\":10}\n"
                "garbage\n"
                "{\"type\":\"weather\",\"seq\":2}\n"
                "{\"type\":\"rss\",\"t_ms\":1}\n"
                "{\"type\":\"event\",\"seq\":3,\"kind\":\"explode\"}\n"
                "[1,2,3]\n"
                "{\"type\":\"progress\",\"seq\":4,\"step\":9,\"loss\":null,\"metrics\":"
                "{\"acc\":\"high\",\"f1\":0.5}}\n"));
  auto h = job_history::load(e, file);
  REQUIRE(h);
  CHECK(h->load_notes().size() == 5);
  for (const auto& n : h->load_notes()) CHECK(n.find(file.string() + ": line ") == 0);
  const auto p = h->page(0);
  CHECK(p.rss.size() == 1);
  REQUIRE(p.progress.size() == 1);
  CHECK(!p.progress[0].loss);
  CHECK(p.progress[0].metrics == std::map<std::string, double>{{"f1", 0.5}});
  CHECK(to_json(p)["progress"][0]["loss"].is_null());
  CHECK(h->last_seq() == 4);
}

TEST_CASE("compaction keeps the bounded state and later appends replay onto it",
          "[unit][job_history]") {
  baton::os::mem_env e;
  history_limits small;
  small.tier_capacity = 4;
  small.max_events = 5;
  small.compact_after_bytes = 2000;
  auto h = open_history(e, small);
  for (int i = 0; i < 500; ++i) {
    REQUIRE(h.add_rss(i, 100 + i / 50, i / 50, i, 1000 + i));
    REQUIRE(h.add_progress(i, i, 0, 1.0 / (i + 1), {}));
    if (i % 50 == 0) REQUIRE(h.add_event(i, history_event_kind::spawn, 100 + i / 50, i / 50, i));
  }
  CHECK(h.page(0).events.size() == 5);  // the oldest dropped past max_events
  // About 100 KB were appended in all; compaction kept the file to the bounded state and less
  // than compact_after_bytes on top.
  CHECK(h.file_bytes() < 12000);
  REQUIRE(h.flush());
  auto back = job_history::load(e, file, small);
  REQUIRE(back);
  CHECK(back->load_notes().empty());
  CHECK(to_json(back->page(0)) == to_json(h.page(0)));
  CHECK(back->last_seq() == h.last_seq());
}

TEST_CASE("a read-only history never writes, and a missing file is an empty history",
          "[unit][job_history]") {
  baton::os::mem_env e;
  REQUIRE(e.create_dirs(dir));
  auto h = job_history::load(e, file);
  REQUIRE(h);
  CHECK(h->size() == 0);
  CHECK(h->page(0).next == 0);
  CHECK(!h->newest_rss());
  REQUIRE(h->add_rss(1, 2, 0, 0, 3));
  CHECK(h->newest_rss()->bytes == 3);
  CHECK(!e.file_exists(file));
}

TEST_CASE("exit causes map to events and restart categories", "[unit][job_history]") {
  CHECK(event_kind_for(exit_cause::memory_soft) == history_event_kind::recycle);
  CHECK(event_kind_for(exit_cause::memory_budget) == history_event_kind::recycle);
  CHECK(event_kind_for(exit_cause::memory_hard) == history_event_kind::recycle);
  CHECK(event_kind_for(exit_cause::crashed) == history_event_kind::crash);
  CHECK(event_kind_for(exit_cause::stalled) == history_event_kind::crash);
  CHECK(event_kind_for(exit_cause::stopped) == history_event_kind::stop);
  CHECK(restart_category(exit_cause::memory_hard) == "recycle");
  CHECK(restart_category(exit_cause::spawn_failed) == "failure");
  CHECK(restart_category(exit_cause::stopped) == "user");
  CHECK(restart_category(exit_cause::cancelled).empty());
  CHECK(restart_category(exit_cause::completed).empty());
  for (auto k :
       {history_event_kind::spawn, history_event_kind::backoff, history_event_kind::cancel}) {
    CHECK(parse_history_event_kind(to_string(k)).value() == k);
  }
  CHECK(!parse_history_event_kind("boom"));
}

TEST_CASE("which state changes are history events, with a worker and at rest",
          "[unit][job_history]") {
  using k = history_event_kind;
  using st = job_state;
  CHECK(state_change_event(st::running, st::backoff, false) == k::backoff);
  CHECK(state_change_event(st::running, st::paused, false) == k::pause);
  CHECK(state_change_event(st::paused, st::queued, true) == k::resume);
  CHECK(state_change_event(st::failed, st::queued, true) == k::resume);
  CHECK(state_change_event(st::cancelled, st::queued, true) == k::resume);
  // A cancel with a worker is its exit's event; at rest nothing else says it.
  CHECK(state_change_event(st::queued, st::cancelled, true) == k::cancel);
  CHECK_FALSE(state_change_event(st::running, st::cancelled, false));
  CHECK_FALSE(state_change_event(st::running, st::running, false));
  CHECK_FALSE(state_change_event(st::running, st::queued, true));  // recovery at start
  CHECK_FALSE(state_change_event(st::paused, st::cancelled, false));
}
