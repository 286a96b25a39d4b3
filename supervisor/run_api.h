// The control API of a foreground run (`baton run CONFIG --dashboard`): the read-only calls the
// dashboard polls (list, status, history, logs), answered for the one job the run supervises
// with the same JSON the daemon sends (job_status.h), so the same page serves both. Anything
// else is refused: a foreground run is changed from its terminal (Ctrl-C), never through a
// listener. The run owns the job's runner, history and store; this borrows them through `view`,
// whose functions are called on the io thread at each request.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "os/env.h"
#include "supervisor/control_api.h"
#include "supervisor/job_history.h"
#include "supervisor/job_record.h"
#include "supervisor/job_runner.h"
#include "supervisor/job_store.h"

namespace baton::supervisor {

struct run_view {
  std::function<const job_record&()> record;
  std::function<const live_status*()> live;  // null when no worker runs
  std::optional<std::int64_t> soft_limit_mib;
  std::optional<std::int64_t> hard_limit_mib;
  const job_history* history = nullptr;  // null when the run keeps none (its file failed)
};

class run_api : public api_handler {
 public:
  run_api(os::env& e, const job_store& store, run_view view)
      : env_(e), store_(store), view_(std::move(view)) {}

  api_response handle(const api_call& call) override;

 private:
  api_response on_call(const list_call&);
  api_response on_call(const status_call& c);
  api_response on_call(const history_call& c);
  api_response on_call(const logs_call& c);
  template <class other_call>
  api_response on_call(const other_call& c);
  const job_record* find(const std::string& id) const;

  os::env& env_;
  const job_store& store_;
  run_view view_;
};

}  // namespace baton::supervisor
