#include "supervisor/run_api.h"

#include <catch2/catch.hpp>
#include <string>

#include "os/mem_env.h"
#include "support/test_paths.h"

using namespace baton::supervisor;
using json = nlohmann::json;

namespace {

struct one_run {
  baton::os::mem_env files;
  job_store store{files, baton::test::abs_path("/state")};
  job_record record;
  live_status live;
  bool running = true;

  one_run() {
    record.id = "seed";
    record.name = "seed";
    record.state = job_state::running;
    record.total_steps = 100;
    record.checkpoint_step = 10;
    live.pid = 7;
    live.step = 12;
    live.rss_bytes = 5 << 20;
  }

  run_api api(const job_history* history = nullptr) {
    return run_api(files, store,
                   run_view{[this]() -> const job_record& { return record; },
                            [this]() -> const live_status* { return running ? &live : nullptr; },
                            64, 128, history});
  }
};

}  // namespace

TEST_CASE("a foreground run answers the dashboard's calls for its one job", "[unit][run_api]") {
  one_run run;
  REQUIRE(run.files.create_dirs(run.store.job_dir("seed")));
  REQUIRE(run.files.put(run.store.log_path("seed"), "hello\n"));
  auto history = job_history::open(run.files, job_history::file_in(run.store.job_dir("seed")));
  REQUIRE(history);
  REQUIRE(history->add_event(1, history_event_kind::spawn, 7, 0, 0, {}, {}));
  auto api = run.api(&*history);

  auto list = api.handle(list_call{});
  REQUIRE(list.status == 200);
  REQUIRE(list.body.at("jobs").size() == 1);
  const auto& item = list.body.at("jobs").at(0);
  CHECK(item.at("id") == "seed");
  CHECK(item.at("state") == "running");
  CHECK(item.at("step") == 12);  // live, not the checkpoint's
  CHECK(item.at("rss_bytes") == 5 << 20);
  CHECK(item.at("soft_limit_mib") == 64);
  CHECK(item.at("hard_limit_mib") == 128);

  auto st = api.handle(status_call{"seed"});
  REQUIRE(st.status == 200);
  CHECK(st.body.at("live").at("pid") == 7);
  CHECK(st.body.at("hard_limit_mib") == 128);

  auto h = api.handle(history_call{"seed", 0});
  REQUIRE(h.status == 200);
  REQUIRE(h.body.at("events").size() == 1);
  CHECK(h.body.at("events").at(0).at("kind") == "spawn");
  CHECK(api.handle(history_call{"seed", h.body.at("next").get<std::int64_t>()})
            .body.at("events")
            .empty());

  auto logs = api.handle(logs_call{"seed", 0});
  REQUIRE(logs.status == 200);
  CHECK(logs.body.at("data") == "hello\n");
  CHECK(logs.body.at("next_offset") == 6);
  CHECK(logs.body.at("state") == "running");

  // At rest between workers: the checkpoint's step, no RSS.
  run.running = false;
  CHECK(api.handle(list_call{}).body.at("jobs").at(0).at("step") == 10);
  CHECK(api.handle(list_call{}).body.at("jobs").at(0).at("rss_bytes") == 0);
}

TEST_CASE("a foreground run's API knows no other job and changes nothing", "[unit][run_api]") {
  one_run run;
  auto api = run.api();
  for (const api_call& c : {api_call(status_call{"other"}), api_call(history_call{"other", 0}),
                            api_call(logs_call{"other", 0})}) {
    const auto r = api.handle(c);
    CHECK(r.status == 404);
    CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("no job 'other'"));
  }
  // No history file could be opened: said, not an empty history.
  const auto h = api.handle(history_call{"seed", 0});
  CHECK(h.status == 503);
  for (const api_call& c :
       {api_call(cancel_call{"seed"}), api_call(resume_call{"seed"}),
        api_call(remove_call{"seed", true}), api_call(prune_call{}), api_call(submit_call{}),
        api_call(metrics_call{}), api_call(dashboard_call{}), api_call(health_call{})}) {
    const auto r = api.handle(c);
    INFO(call_name(c));
    CHECK(r.status == 405);
    CHECK_THAT(r.body.at("error").get<std::string>(), Catch::Contains("read-only"));
  }
  CHECK(run.record.state == job_state::running);
}
