#include "supervisor/metrics_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>

#include "supervisor/job_status.h"
#include "supervisor/leak_rate.h"

namespace baton::supervisor {

namespace {

// Go's ParseFloat spellings, which Prometheus reads; otherwise the shortest exact decimal.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), r.ptr);
}

std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using labels = std::vector<std::pair<std::string, std::string>>;

// One metric family: HELP, TYPE, then all its samples together, as the format requires.
class family {
 public:
  family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += escape_help(help);
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const labels& ls, double value) {
    out_ += name_;
    if (!ls.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < ls.size(); ++i) {
        if (i > 0) out_ += ',';
        out_ += ls[i].first;
        out_ += "=\"";
        out_ += escape_label_value(ls[i].second);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += format_value(value);
    out_ += '\n';
  }

 private:
  std::string& out_;
  std::string_view name_;
};

constexpr std::array<job_state, 8> all_states = {
    job_state::queued,    job_state::running, job_state::waiting,   job_state::backoff,
    job_state::completed, job_state::failed,  job_state::cancelled, job_state::paused};

// Not "job": Prometheus sets its own `job` label (the scrape job) and would rename ours.
labels job_label(const metrics_job& j) { return {{"job_id", j.record->id}}; }

// The current worker's leak rate over its steady part: fitted on its curve while it runs, the
// stored estimate once it ended; none while there are not enough samples (leak_rate.h).
std::optional<double> current_leak(const job_record& r) {
  if (r.shards.empty()) return std::nullopt;
  const auto& s = r.shards.back();
  if (s.cause) return s.leak_bytes_per_step;
  const auto rate = estimate_leak({shard_leak_sums(s)});
  return rate ? std::optional<double>(rate->bytes_per_step) : std::nullopt;
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_metrics(const metrics_snapshot& s) {
  std::string out;
  std::vector<const metrics_job*> jobs;
  for (const auto& j : s.jobs) {
    if (j.record) jobs.push_back(&j);
  }
  // A family is written only if it has a sample: HELP and TYPE alone are legal but noise.
  auto each = [&](std::string_view name, std::string_view type, std::string_view help,
                  const std::function<void(const metrics_job&, family&)>& fill,
                  const std::function<bool(const metrics_job&)>& has) {
    if (std::none_of(jobs.begin(), jobs.end(), [&](const auto* j) { return has(*j); })) return;
    family f(out, name, type, help);
    for (const auto* j : jobs) {
      if (has(*j)) fill(*j, f);
    }
  };
  const auto always = [](const metrics_job&) { return true; };

  {
    family f(out, "baton_daemon_uptime_seconds", "gauge", "Seconds since the daemon started.");
    f.sample({}, s.uptime_seconds);
  }
  if (s.daemon_rss_bytes) {
    family f(out, "baton_daemon_resident_memory_bytes", "gauge",
             "Resident memory of the daemon process itself (not its workers).");
    f.sample({}, static_cast<double>(*s.daemon_rss_bytes));
  }
  each(
      "baton_job_state", "gauge", "The job's state: 1 for the state it is in, 0 for the others.",
      [](const metrics_job& j, family& f) {
        for (auto st : all_states) {
          auto ls = job_label(j);
          ls.emplace_back("state", std::string(to_string(st)));
          f.sample(ls, j.record->state == st ? 1 : 0);
        }
      },
      always);
  each(
      "baton_job_worker_resident_memory_bytes", "gauge",
      "Resident memory of the job's current worker and all its descendants, newest sample.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(j.live->rss_bytes));
      },
      [](const metrics_job& j) { return j.live && j.live->rss_bytes > 0; });
  each(
      "baton_job_worker_pid", "gauge", "Process id of the job's current worker.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(j.live->pid));
      },
      [](const metrics_job& j) { return j.live && j.live->pid > 0; });
  each(
      "baton_job_peak_resident_memory_bytes", "gauge",
      "Highest resident memory any worker of the job reached.",
      [](const metrics_job& j, family& f) {
        std::int64_t peak = 0;
        for (const auto& sh : j.record->shards) peak = std::max(peak, sh.peak_rss_bytes);
        if (j.live) peak = std::max(peak, static_cast<std::int64_t>(j.live->rss_bytes));
        f.sample(job_label(j), static_cast<double>(peak));
      },
      always);
  each(
      "baton_job_memory_soft_limit_bytes", "gauge",
      "Memory soft limit: past it a worker checkpoints and is replaced by a fresh one.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(*j.soft_limit_mib) * 1048576.0);
      },
      [](const metrics_job& j) { return j.soft_limit_mib.has_value(); });
  each(
      "baton_job_memory_hard_limit_bytes", "gauge",
      "Memory hard limit: past it a worker is killed at once.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(*j.hard_limit_mib) * 1048576.0);
      },
      [](const metrics_job& j) { return j.hard_limit_mib.has_value(); });
  each(
      "baton_job_steps_done", "gauge",
      "Training steps done: the worker's newest step while one runs, else the checkpoint's.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j),
                 static_cast<double>(j.live ? j.live->step : j.record->checkpoint_step));
      },
      always);
  each(
      "baton_job_steps_target", "gauge", "Training steps the job runs in all (when known).",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(j.record->total_steps));
      },
      [](const metrics_job& j) { return j.record->total_steps > 0; });
  each(
      "baton_job_checkpoint_step", "gauge", "Step of the job's newest verified checkpoint.",
      [](const metrics_job& j, family& f) {
        f.sample(job_label(j), static_cast<double>(j.record->checkpoint_step));
      },
      always);
  const auto loss_of = [](const metrics_job& j) -> std::optional<double> {
    auto it = j.record->metrics.find("loss");
    if (it == j.record->metrics.end() || !std::isfinite(it->second)) return std::nullopt;
    return it->second;
  };
  each(
      "baton_job_loss", "gauge", "Training loss of the newest progress report.",
      [&](const metrics_job& j, family& f) { f.sample(job_label(j), *loss_of(j)); },
      [&](const metrics_job& j) { return loss_of(j).has_value(); });
  const auto has_metrics = [](const metrics_job& j) {
    for (const auto& [k, v] : j.record->metrics) {
      if (k != "loss" && std::isfinite(v)) return true;
    }
    return false;
  };
  each(
      "baton_job_metric", "gauge",
      "Other metrics of the newest progress report (accuracy, val_loss, ...), by name.",
      [](const metrics_job& j, family& f) {
        for (const auto& [k, v] : j.record->metrics) {
          if (k == "loss" || !std::isfinite(v)) continue;
          auto ls = job_label(j);
          ls.emplace_back("metric", k);
          f.sample(ls, v);
        }
      },
      has_metrics);
  each(
      "baton_job_worker_leak_bytes_per_step", "gauge",
      "Memory growth of the current (or last) worker per training step, least-squares fit; "
      "absent with fewer than 5 samples.",
      [](const metrics_job& j, family& f) { f.sample(job_label(j), *current_leak(*j.record)); },
      [](const metrics_job& j) { return current_leak(*j.record).has_value(); });
  const auto checkpoint_age = [&](const metrics_job& j) -> std::optional<double> {
    if (!j.history) return std::nullopt;
    auto e = j.history->newest_event(history_event_kind::checkpoint);
    if (!e) return std::nullopt;
    return static_cast<double>(std::max<std::int64_t>(0, s.now_ms - e->t_ms)) / 1000.0;
  };
  each(
      "baton_job_checkpoint_age_seconds", "gauge",
      "Seconds since the running job's newest checkpoint verified.",
      [&](const metrics_job& j, family& f) { f.sample(job_label(j), *checkpoint_age(j)); },
      [&](const metrics_job& j) { return checkpoint_age(j).has_value(); });
  each(
      "baton_job_restarts_total", "counter",
      "Workers of the job that ended before the job did, by cause: recycle (a planned memory "
      "recycle), failure (crash, stall, spawn failure), user (stopped by Ctrl-C or a daemon stop).",
      [](const metrics_job& j, family& f) {
        std::map<std::string, double> by{{"recycle", 0}, {"failure", 0}, {"user", 0}};
        for (const auto& [name, n] : j.record->exits_by_cause) {
          auto c = parse_exit_cause(name);
          if (!c) continue;
          const auto cat = restart_category(*c);
          if (!cat.empty()) by[std::string(cat)] += n;
        }
        for (const auto& [cat, n] : by) {
          auto ls = job_label(j);
          ls.emplace_back("cause", cat);
          f.sample(ls, n);
        }
      },
      always);
  return out;
}

}  // namespace baton::supervisor
