// The control API's routes, one on_call each (see control_api.h for the calls and
// protocol/README.md for the wire contract). They run on the io thread, answer at once and never
// block: what takes long (a worker's stop, a job's start) is started here and reported later.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "os/self_memory.h"
#include "os/system.h"
#include "protocol/version.h"
#include "supervisor/daemon_impl.h"
#include "supervisor/job_access.h"
#include "supervisor/job_log.h"
#include "supervisor/job_status.h"
#include "supervisor/metrics_text.h"

namespace baton::supervisor {

using json = nlohmann::json;

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl == std::string::npos ? nl : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return lines;
}

api_response invalid_spec(const std::string& message) {
  auto r = error_response(400, message);
  r.body["errors"] = split_lines(message);
  return r;
}

}  // namespace

daemon::impl::job_entry* daemon::impl::find(const std::string& id) {
  const auto it = jobs.find(id);
  return it == jobs.end() ? nullptr : &it->second;
}

api_response daemon::impl::no_job(const std::string& id) {
  return error_response(404, "no job '" + id + "'");
}

nlohmann::json daemon::impl::status_of(const job_entry& j) {
  const auto& r = j.current();
  std::optional<std::int64_t> soft, hard;
  if (j.spec) {
    soft = j.spec->memory.soft_limit_mib;
    hard = j.spec->memory.hard_limit_mib;
  }
  // A failed or crashed job's last log lines: a bounded read (8 KiB) of its log.
  const auto log_of = worker_log_view(e, store, r);
  json out = job_status_json(r, j.runner ? &j.runner->live() : nullptr, soft, hard, &log_of);
  // What holds this job's workers (cgroup, or the process-group fallback: escapees may leave).
  out["containment"] = containment.mode;
  if (r.state == job_state::queued) {
    const auto pos = std::find(queue.begin(), queue.end(), r.id);
    if (pos != queue.end()) out["queue_position"] = pos - queue.begin() + 1;
  }
  return out;
}

api_response daemon::impl::on_call(const submit_call& c, const api_caller&) {
  if (stopping) return error_response(503, "the baton daemon is shutting down");
  if (auto refused = check_submitter(options.settings, c.peer_uid)) {
    return error_response(*refused);
  }
  auto spec = protocol::parse_job_spec(c.spec.dump(), c.base_dir);
  if (!spec) return invalid_spec(spec.error().message);
  if (auto s = protocol::check_job_files(e, *spec); !s) return invalid_spec(s.error().message);
  if (!spec->worker.command && options.worker_exe.empty()) {
    return invalid_spec(
        "worker.command: required: this daemon has no built-in worker (baton-worker was not "
        "found next to baton; set BATON_WORKER for `baton serve`)");
  }
  if (!spec->memory.soft_limit_mib && !spec->memory.hard_limit_mib) {
    spec->memory.soft_limit_mib = options.settings.default_soft_limit_mib;
    spec->memory.hard_limit_mib = options.settings.default_hard_limit_mib;
  }
  // With the limits it will run under: a job that cannot fit is refused now, not at its worker.
  if (auto s = protocol::check_job_limits(*spec, protocol::this_machine()); !s) {
    return invalid_spec(s.error().message);
  }
  const bool as_submitter = options.settings.run_as == jobs_run_as::submitter;
  auto created =
      store.create(*spec, protocol::planned_total_steps(*spec), std::nullopt,
                   job_owner{c.peer_uid, c.peer_gid, c.peer_groups, c.path}, as_submitter);
  if (!created) return error_response(500, "cannot create the job: " + created.error().message);
  const std::string id = created->id;
  auto& entry =
      jobs.emplace(id, job_entry{std::move(*created), std::move(*spec), nullptr}).first->second;
  if (feed(entry.record, ev::submitted{}).wants_slot) queue.push_back(id);
  log(log_level::info, "job " + id + ": submitted by uid " + std::to_string(c.peer_uid));
  start_next();
  const auto& j = jobs.at(id);
  json body = {{"id", id}, {"state", to_string(j.current().state)}};
  if (const auto pos = std::find(queue.begin(), queue.end(), id); pos != queue.end()) {
    body["queue_position"] = pos - queue.begin() + 1;
  }
  return {201, std::move(body)};
}

api_response daemon::impl::on_call(const list_call&, const api_caller& caller) {
  std::vector<const job_entry*> all;
  for (const auto& [id, j] : jobs) {
    if (may_access(caller, job_owner_uid(j.current(), daemon_uid))) all.push_back(&j);
  }
  std::sort(all.begin(), all.end(), [](const job_entry* a, const job_entry* b) {
    return created_before(a->current(), b->current());
  });
  json list = json::array();
  for (const auto* j : all) {
    std::optional<std::int64_t> soft, hard;
    if (j->spec) {
      soft = j->spec->memory.soft_limit_mib;
      hard = j->spec->memory.hard_limit_mib;
    }
    list.push_back(
        job_list_item(j->current(), j->runner ? &j->runner->live() : nullptr, soft, hard));
  }
  return {200, {{"schema_version", json_schema_version}, {"jobs", std::move(list)}}};
}

api_response daemon::impl::on_call(const status_call& c) {
  const auto* j = find(c.id);
  if (!j) return no_job(c.id);
  return {200, status_of(*j)};
}

api_response daemon::impl::on_call(const logs_call& c) {
  const auto* j = find(c.id);
  if (!j) return no_job(c.id);
  auto chunk = read_log_chunk(e, store.log_path(c.id), c.offset);
  if (!chunk) return error_response(500, chunk.error().message);
  return {200, job_logs_json(c.id, std::move(*chunk), j->current().state)};
}

api_response daemon::impl::on_call(const cancel_call& c) {
  auto* j = find(c.id);
  if (!j) return no_job(c.id);
  if (j->runner) {
    log(log_level::info, "job " + c.id + ": cancel requested");
    j->runner->cancel();
  } else {
    auto& r = j->record;
    if (feed(r, ev::cancel_requested{}).ignored) {
      return error_response(409,
                            "job '" + c.id + "' is already " + std::string(to_string(r.state)));
    }
    log(log_level::info, "job " + c.id + ": cancelled before it ran again");
    publish_status();
  }
  return {202, {{"id", c.id}, {"state", to_string(j->current().state)}}};
}

api_response daemon::impl::on_call(const resume_call& c) {
  if (stopping) return error_response(503, "the baton daemon is shutting down");
  auto* j = find(c.id);
  if (!j) return no_job(c.id);
  const auto st = j->current().state;
  if (st != job_state::paused && st != job_state::failed && st != job_state::cancelled) {
    return error_response(409, "job '" + c.id + "' is " + std::string(to_string(st)) +
                                   "; only a paused, failed or cancelled job can be resumed");
  }
  if (j->runner) {
    // Paused but not yet handed back (its rest is being posted): the runner resumes itself.
    j->runner->resume();
  } else {
    auto& r = j->record;
    log(log_level::info, "job " + c.id + ": resumed at checkpoint step " +
                             std::to_string(r.checkpoint_step) +
                             (r.diagnosis.empty() ? "" : " (was paused: " + r.diagnosis + ")"));
    if (feed(r, ev::resume_requested{true}).wants_slot) queue.push_back(c.id);
    start_next();
  }
  return {202, {{"id", c.id}, {"state", to_string(j->current().state)}}};
}

api_response daemon::impl::on_call(const health_call&) {
  std::map<std::string, int> by_state;
  for (const auto& [id, j] : jobs) ++by_state[std::string(to_string(j.current().state))];
  return {200,
          {{"status", stopping ? "stopping" : "ok"},
           {"version", std::string(protocol::version())},
           {"pid", os::current_pid()},
           {"uptime_ms", unix_ms_now() - started_ms},
           {"max_workers", options.settings.max_workers},
           {"running", running},
           {"queued", queue.size()},
           {"jobs", by_state},
           {"containment", {{"mode", containment.mode}, {"detail", containment.detail}}},
           {"state_dir", store.state_dir().string()}}};
}

api_response daemon::impl::on_call(const metrics_call&) {
  metrics_snapshot snap;
  snap.now_ms = unix_ms_now();
  snap.uptime_seconds = static_cast<double>(snap.now_ms - started_ms) / 1000.0;
  // Where the OS will not say, the family is left out.
  if (auto rss = os::own_rss_bytes()) snap.daemon_rss_bytes = *rss;
  snap.jobs.reserve(jobs.size());
  for (const auto& [id, j] : jobs) {
    metrics_job m;
    m.record = &j.current();
    m.live = j.runner ? &j.runner->live() : nullptr;
    m.history = j.history.get();
    if (j.spec) {
      m.soft_limit_mib = j.spec->memory.soft_limit_mib;
      m.hard_limit_mib = j.spec->memory.hard_limit_mib;
    }
    snap.jobs.push_back(m);
  }
  api_response r;
  r.text = render_metrics(snap);
  r.content_type = std::string(metrics_content_type);
  return r;
}

api_response daemon::impl::on_call(const history_call& c) {
  const auto* j = find(c.id);
  if (!j) return no_job(c.id);
  if (j->history) return {200, to_json(j->history->page(c.since))};
  // A job at rest: its file, read only. Bounded (job_history.h), so a read of at most a few MiB,
  // and not again while the file is unchanged (nothing appends to a job at rest but a resume).
  const auto file = job_history::file_in(store.job_dir(c.id));
  const auto info = e.stat_no_follow(file);
  const std::uint64_t size = info ? info->size : 0;
  auto& cached = rest_history_cache;
  if (!cached.history || cached.id != c.id || cached.file_size != size) {
    auto h = job_history::load(e, file);
    if (!h) return error_response(500, h.error().message);
    cached = {c.id, size, std::make_unique<job_history>(std::move(*h))};
  }
  return {200, to_json(cached.history->page(c.since))};
}

status daemon::impl::remove_job(const std::string& id) {
  if (auto s = store.remove(id); !s) return s;
  if (rest_history_cache.id == id) rest_history_cache = {};  // a new job may take the id
  queue.erase(std::remove(queue.begin(), queue.end(), id), queue.end());
  jobs.erase(id);
  log(log_level::info, "job " + id + ": removed");
  publish_status();
  return {};
}

api_response daemon::impl::on_call(const remove_call& c) {
  if (stopping) return error_response(503, "the baton daemon is shutting down");
  auto* j = find(c.id);
  if (!j) return no_job(c.id);
  if (j->runner) {
    const auto state = std::string(to_string(j->current().state));
    if (!c.force) {
      return error_response(409, "job '" + c.id + "' is " + state +
                                     "; cancel it first, or remove it with --force (which "
                                     "cancels it)");
    }
    log(log_level::info, "job " + c.id + ": remove requested while " + state + "; cancelling");
    j->remove_at_rest = true;
    j->runner->cancel();
    return {202, {{"id", c.id}, {"removed", false}, {"state", to_string(j->current().state)}}};
  }
  if (auto s = remove_job(c.id); !s) return error_response(500, s.error().message);
  return {200, {{"id", c.id}, {"removed", true}}};
}

api_response daemon::impl::on_call(const prune_call& c, const api_caller& caller) {
  if (stopping) return error_response(503, "the baton daemon is shutting down");
  const auto now = unix_ms_now();
  std::vector<std::string> chosen;
  for (const auto& [id, j] : jobs) {
    if (j.runner) continue;
    const auto& r = j.record;
    if (!may_access(caller, job_owner_uid(r, daemon_uid))) continue;  // others' jobs stay
    if (!is_terminal(r.state)) continue;
    const auto name = std::string(to_string(r.state));
    if (std::find(c.states.begin(), c.states.end(), name) == c.states.end()) continue;
    if (c.older_than_ms && now - r.updated_ms < *c.older_than_ms) continue;
    chosen.push_back(id);
  }
  json removed = json::array();
  json errors = json::array();
  for (const auto& id : chosen) {
    if (c.dry_run) {
      removed.push_back(id);
    } else if (auto s = remove_job(id); s) {
      removed.push_back(id);
    } else {
      errors.push_back({{"id", id}, {"error", s.error().message}});
    }
  }
  return {200,
          {{"removed", std::move(removed)}, {"errors", std::move(errors)}, {"dry_run", c.dry_run}}};
}

api_response daemon::impl::on_call(const dashboard_call&, const api_caller& caller) {
  // The URL carries the token, which reads every job through the dashboard: not for a user
  // who may see only their own.
  if (!caller.privileged) {
    return error_response(403,
                          "the dashboard shows every job, so its URL is only for root and "
                          "the daemon's user (uid " +
                              std::to_string(daemon_uid) + "); you are uid " +
                              std::to_string(caller.uid));
  }
  if (!http) {
    return error_response(404,
                          "the dashboard is off: set http_listen in the daemon's settings (e.g. "
                          "\"127.0.0.1:9464\") and restart it");
  }
  return {200, {{"url", http->dashboard_url()}}};
}

}  // namespace baton::supervisor
