#include "supervisor/run_api.h"

#include "supervisor/job_log.h"
#include "supervisor/job_status.h"

namespace baton::supervisor {

using json = nlohmann::json;

api_response run_api::handle(const api_call& call) {
  return std::visit([this](const auto& c) { return on_call(c); }, call);
}

const job_record* run_api::find(const std::string& id) const {
  const auto& r = view_.record();
  return r.id == id ? &r : nullptr;
}

api_response run_api::on_call(const list_call&) {
  json list = json::array();
  list.push_back(
      job_list_item(view_.record(), view_.live(), view_.soft_limit_mib, view_.hard_limit_mib));
  return {200, {{"jobs", std::move(list)}}};
}

api_response run_api::on_call(const status_call& c) {
  const auto* r = find(c.id);
  if (!r) return error_response(404, "no job '" + c.id + "' in this run");
  return {200, job_status_json(*r, view_.live(), view_.soft_limit_mib, view_.hard_limit_mib)};
}

api_response run_api::on_call(const history_call& c) {
  const auto* r = find(c.id);
  if (!r) return error_response(404, "no job '" + c.id + "' in this run");
  if (!view_.history) return error_response(503, "this run keeps no history (see its output)");
  return {200, to_json(view_.history->page(c.since))};
}

api_response run_api::on_call(const logs_call& c) {
  const auto* r = find(c.id);
  if (!r) return error_response(404, "no job '" + c.id + "' in this run");
  auto chunk = read_log_chunk(env_, store_.log_path(c.id), c.offset);
  if (!chunk) return error_response(500, chunk.error().message);
  return {200, job_logs_json(c.id, std::move(*chunk), r->state)};
}

template <class other_call>
api_response run_api::on_call(const other_call& c) {
  return error_response(
      405, "baton run serves its dashboard read-only: " + std::string(call_name(api_call(c))) +
               " is for the daemon (baton serve)");
}

}  // namespace baton::supervisor
