#include "supervisor/job_history.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace baton::supervisor {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 10> event_names = {
    "spawn",   "recycle",    "crash", "stop",   "completed",
    "backoff", "checkpoint", "pause", "resume", "cancel"};

// At most this many load notes: a file of garbage must not become a megabyte of notes.
constexpr std::size_t max_notes = 8;

std::optional<double> finite(std::optional<double> v) {
  if (v && std::isfinite(*v)) return v;
  return std::nullopt;
}

std::map<std::string, double> finite_metrics(const std::map<std::string, double>& m) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : m) {
    if (std::isfinite(v)) out.emplace(k, v);
  }
  return out;
}

std::optional<double> min_opt(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}
std::optional<double> max_opt(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// Two entries of one tier as one entry of the next: the newer one's values, the extremes of both.
history_rss merge(const history_rss& a, const history_rss& b) {
  history_rss m = b;
  m.min_bytes = std::min(a.min_bytes, b.min_bytes);
  m.max_bytes = std::max(a.max_bytes, b.max_bytes);
  m.count = a.count + b.count;
  return m;
}
history_progress merge(const history_progress& a, const history_progress& b) {
  history_progress m = b;
  m.first_step = a.first_step;
  m.loss_min = min_opt(a.loss_min, b.loss_min);
  m.loss_max = max_opt(a.loss_max, b.loss_max);
  m.count = a.count + b.count;
  return m;
}
bool mergeable(const history_rss& a, const history_rss& b) { return a.pid == b.pid; }
bool mergeable(const history_progress&, const history_progress&) { return true; }

// Pushes `x` at the newest end of tier `k`, cascading the overflow into older tiers.
template <class T>
void push_tiered(std::vector<std::deque<T>>& tiers, T x, std::size_t k, std::size_t capacity) {
  if (tiers.size() <= k) tiers.resize(k + 1);
  tiers[k].push_back(std::move(x));
  for (std::size_t i = k; i < tiers.size() && tiers[i].size() > capacity; ++i) {
    if (tiers.size() <= i + 1) tiers.resize(i + 2);
    auto& t = tiers[i];
    T a = std::move(t.front());
    t.pop_front();
    // Entries of two workers never merge: the older moves up alone, so each worker's curve
    // keeps its own last sample before a recycle.
    if (!t.empty() && mergeable(a, t.front())) {
      T b = std::move(t.front());
      t.pop_front();
      tiers[i + 1].push_back(merge(a, b));
    } else {
      tiers[i + 1].push_back(std::move(a));
    }
  }
}

template <class T, class F>
void for_each_oldest_first(const std::vector<std::deque<T>>& tiers, F f) {
  for (auto t = tiers.rbegin(); t != tiers.rend(); ++t) {
    for (const auto& x : *t) f(x, static_cast<std::size_t>(tiers.rend() - t - 1));
  }
}

std::int64_t get_i64(const json& j, const char* key, std::int64_t fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  return it->get<std::int64_t>();
}
std::optional<double> get_num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return finite(it->get<double>());
}
std::string get_str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

}  // namespace

std::string_view to_string(history_event_kind k) {
  return event_names[static_cast<std::size_t>(k)];
}

result<history_event_kind> parse_history_event_kind(std::string_view s) {
  for (std::size_t i = 0; i < event_names.size(); ++i) {
    if (event_names[i] == s) return static_cast<history_event_kind>(i);
  }
  return make_error("unknown history event \"" + std::string(s) + "\"");
}

history_event_kind event_kind_for(exit_cause c) {
  switch (c) {
    case exit_cause::completed:
      return history_event_kind::completed;
    case exit_cause::memory_soft:
    case exit_cause::memory_budget:
    case exit_cause::memory_hard:
      return history_event_kind::recycle;
    case exit_cause::crashed:
    case exit_cause::stalled:
    case exit_cause::spawn_failed:
      return history_event_kind::crash;
    case exit_cause::stopped:
      return history_event_kind::stop;
    case exit_cause::cancelled:
      return history_event_kind::cancel;
  }
  return history_event_kind::crash;
}

std::string_view restart_category(exit_cause c) {
  switch (event_kind_for(c)) {
    case history_event_kind::recycle:
      return "recycle";
    case history_event_kind::crash:
      return "failure";
    case history_event_kind::stop:
      return "user";
    default:
      return "";
  }
}

json to_json(const history_rss& r) {
  json j = {{"seq", r.seq},     {"t_ms", r.t_ms}, {"pid", r.pid},
            {"shard", r.shard}, {"step", r.step}, {"bytes", r.bytes}};
  if (r.count > 1) {
    j["min_bytes"] = r.min_bytes;
    j["max_bytes"] = r.max_bytes;
    j["count"] = r.count;
  }
  return j;
}

json to_json(const history_progress& p) {
  json j = {{"seq", p.seq},     {"t_ms", p.t_ms},  {"step", p.step},
            {"epoch", p.epoch}, {"loss", nullptr}, {"metrics", json::object()}};
  if (p.loss) j["loss"] = *p.loss;
  for (const auto& [k, v] : p.metrics) j["metrics"][k] = v;
  if (p.count > 1) {
    j["first_step"] = p.first_step;
    j["loss_min"] = p.loss_min ? json(*p.loss_min) : json(nullptr);
    j["loss_max"] = p.loss_max ? json(*p.loss_max) : json(nullptr);
    j["count"] = p.count;
  }
  return j;
}

json to_json(const history_event& e) {
  json j = {{"seq", e.seq}, {"t_ms", e.t_ms},   {"kind", to_string(e.kind)},
            {"pid", e.pid}, {"shard", e.shard}, {"step", e.step}};
  if (!e.cause.empty()) j["cause"] = e.cause;
  if (!e.detail.empty()) j["detail"] = e.detail;
  return j;
}

json to_json(const history_page& p) {
  json j = {{"since", p.since},
            {"next", p.next},
            {"rss", json::array()},
            {"progress", json::array()},
            {"events", json::array()}};
  for (const auto& r : p.rss) j["rss"].push_back(to_json(r));
  for (const auto& x : p.progress) j["progress"].push_back(to_json(x));
  for (const auto& e : p.events) j["events"].push_back(to_json(e));
  return j;
}

fs::path job_history::file_in(const fs::path& job_dir) { return job_dir / "history.jsonl"; }

job_history::job_history(os::env& e, fs::path file, history_limits limits, bool writable)
    : env_(&e), file_(std::move(file)), limits_(limits), writable_(writable) {
  limits_.tier_capacity = std::max<std::size_t>(limits_.tier_capacity, 2);
}

job_history::job_history(job_history&&) noexcept = default;
job_history& job_history::operator=(job_history&&) noexcept = default;
job_history::~job_history() {
  (void)flush();  // nowhere to report it: the job is at rest, and memory held the entries
  if (out_) (void)out_->close();
}

result<job_history> job_history::open(os::env& e, fs::path file, history_limits limits) {
  job_history h(e, std::move(file), limits, true);
  if (auto s = h.load_file(); !s) return s.error();
  // A torn tail is rewritten away at once, so the next load does not note it again and the next
  // append does not start inside it.
  if (h.need_newline_) {
    if (auto s = h.compact(); !s) h.notes_.push_back(s.error().message);
  }
  return h;
}

result<job_history> job_history::load(os::env& e, fs::path file, history_limits limits) {
  job_history h(e, std::move(file), limits, false);
  if (auto s = h.load_file(); !s) return s.error();
  return h;
}

status job_history::load_file() {
  if (!env_->file_exists(file_)) return {};
  auto text = env_->read_file(file_);
  if (!text) return with_context("history " + file_.string(), text.error());
  file_bytes_ = text->size();
  std::size_t start = 0;
  std::size_t line_no = 0;
  while (start < text->size()) {
    ++line_no;
    const auto nl = text->find('\n', start);
    const bool torn = nl == std::string::npos;
    const auto end = torn ? text->size() : nl;
    replay_line(std::string_view(*text).substr(start, end - start), line_no, torn);
    if (torn) {
      need_newline_ = true;
      break;
    }
    start = nl + 1;
  }
  // What was appended before this load counts toward the next compaction, so a file that grew
  // over many daemon restarts is compacted all the same.
  appended_since_compaction_ = file_bytes_;
  return {};
}

void job_history::replay_line(std::string_view line, std::size_t line_no,
                              bool last_without_newline) {
  if (line.empty()) return;
  auto note = [&](const std::string& why) {
    if (notes_.size() < max_notes) {
      notes_.push_back(file_.string() + ": line " + std::to_string(line_no) + ": " + why);
    }
  };
  // Our own lines are flat; a deeper one is damage, and dropping deep values keeps parsing flat.
  json j = json::parse(
      line, [](int depth, json::parse_event_t, json&) { return depth <= 3; }, false);
  if (j.is_discarded() || !j.is_object()) {
    note(last_without_newline ? "a torn last line (" + std::to_string(line.size()) +
                                    " bytes, cut by a crash mid-append) was ignored"
                              : "not a JSON object, ignored");
    return;
  }
  const std::string type = get_str(j, "type");
  const auto seq = get_i64(j, "seq", -1);
  if (seq < 0) {
    note("no \"seq\", ignored");
    return;
  }
  // A compacted line names its tier; a line appended as it came goes through tier 0 again.
  const auto tier_raw = get_i64(j, "tier", 0);
  const auto tier = static_cast<std::size_t>(std::clamp<std::int64_t>(tier_raw, 0, 62));
  if (type == "rss") {
    history_rss r;
    r.seq = seq;
    r.t_ms = get_i64(j, "t_ms");
    r.pid = get_i64(j, "pid");
    r.shard = get_i64(j, "shard");
    r.step = get_i64(j, "step");
    r.bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, get_i64(j, "bytes")));
    r.min_bytes = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, get_i64(j, "min_bytes", static_cast<std::int64_t>(r.bytes))));
    r.max_bytes = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, get_i64(j, "max_bytes", static_cast<std::int64_t>(r.bytes))));
    r.count = std::max<std::int64_t>(1, get_i64(j, "count", 1));
    push_rss(r, tier);
  } else if (type == "progress") {
    history_progress p;
    p.seq = seq;
    p.t_ms = get_i64(j, "t_ms");
    p.step = get_i64(j, "step");
    p.first_step = get_i64(j, "first_step", p.step);
    p.epoch = get_i64(j, "epoch");
    p.loss = get_num(j, "loss");
    p.loss_min = j.contains("loss_min") ? get_num(j, "loss_min") : p.loss;
    p.loss_max = j.contains("loss_max") ? get_num(j, "loss_max") : p.loss;
    if (auto m = j.find("metrics"); m != j.end() && m->is_object()) {
      for (const auto& [k, v] : m->items()) {
        if (v.is_number() && std::isfinite(v.get<double>())) p.metrics[k] = v.get<double>();
      }
    }
    p.count = std::max<std::int64_t>(1, get_i64(j, "count", 1));
    push_progress(std::move(p), tier);
  } else if (type == "event") {
    auto kind = parse_history_event_kind(get_str(j, "kind"));
    if (!kind) {
      note(kind.error().message + ", ignored");
      return;
    }
    history_event e;
    e.seq = seq;
    e.t_ms = get_i64(j, "t_ms");
    e.kind = *kind;
    e.pid = get_i64(j, "pid");
    e.shard = get_i64(j, "shard", -1);
    e.step = get_i64(j, "step");
    e.cause = get_str(j, "cause");
    e.detail = get_str(j, "detail");
    push_event(std::move(e));
  } else {
    note("unknown type \"" + type + "\", ignored");
    return;
  }
  seq_ = std::max(seq_, seq);
}

void job_history::push_rss(history_rss r, std::size_t tier) {
  push_tiered(rss_, std::move(r), tier, limits_.tier_capacity);
}
void job_history::push_progress(history_progress p, std::size_t tier) {
  push_tiered(progress_, std::move(p), tier, limits_.tier_capacity);
}
void job_history::push_event(history_event ev) {
  events_.push_back(std::move(ev));
  while (events_.size() > limits_.max_events) events_.pop_front();
}

status job_history::append_line(const json& j, std::int64_t t_ms) {
  if (!writable_) return {};
  if (appended_since_compaction_ >= limits_.compact_after_bytes) return compact();
  if (pending_.empty()) {
    pending_since_ms_ = t_ms;
    if (need_newline_) pending_ += '\n';
    need_newline_ = false;
  }
  const auto before = pending_.size();
  pending_ += j.dump();
  pending_ += '\n';
  appended_since_compaction_ += pending_.size() - before;
  if (pending_.size() >= limits_.flush_bytes ||
      t_ms - pending_since_ms_ >= limits_.flush_after_ms) {
    return flush();
  }
  return {};
}

status job_history::flush() {
  if (!writable_ || pending_.empty()) return {};
  std::string text = std::move(pending_);
  pending_.clear();
  if (!out_) {
    auto f = env_->new_appendable_file(file_);
    if (!f) return with_context("history " + file_.string(), f.error());
    out_ = std::move(*f);
  }
  if (auto s = out_->append(text); !s) {
    // The handle may be broken: the next flush opens the file again. What it held is lost from
    // the file (a torn line at worst, skipped at load); memory keeps every entry.
    out_.reset();
    need_newline_ = true;
    return with_context("history " + file_.string(), s.error());
  }
  file_bytes_ += text.size();
  return {};
}

status job_history::compact() {
  if (!writable_) return {};
  // The in-memory state written below holds every pending entry too.
  pending_.clear();
  if (out_) {
    (void)out_->close();  // the rename below replaces the file this handle writes to
    out_.reset();
  }
  std::string text;
  auto line = [&](json j, const char* type, std::size_t tier) {
    j["type"] = type;
    if (tier > 0) j["tier"] = tier;
    text += j.dump();
    text += '\n';
  };
  for_each_oldest_first(rss_,
                        [&](const history_rss& r, std::size_t k) { line(to_json(r), "rss", k); });
  for_each_oldest_first(progress_, [&](const history_progress& p, std::size_t k) {
    line(to_json(p), "progress", k);
  });
  for (const auto& e : events_) line(to_json(e), "event", 0);
  if (auto s = os::write_file_atomic(*env_, file_, text); !s) {
    return with_context("history " + file_.string() + ": compaction", s.error());
  }
  need_newline_ = false;
  file_bytes_ = text.size();
  appended_since_compaction_ = 0;
  return {};
}

status job_history::add_rss(std::int64_t t_ms, std::int64_t pid, std::int64_t shard,
                            std::int64_t step, std::uint64_t bytes) {
  history_rss r;
  r.seq = ++seq_;
  r.t_ms = t_ms;
  r.pid = pid;
  r.shard = shard;
  r.step = step;
  r.bytes = r.min_bytes = r.max_bytes = bytes;
  json j = to_json(r);
  j["type"] = "rss";
  push_rss(r, 0);
  return append_line(j, t_ms);
}

status job_history::add_progress(std::int64_t t_ms, std::int64_t step, std::int64_t epoch,
                                 std::optional<double> loss,
                                 const std::map<std::string, double>& metrics) {
  history_progress p;
  p.seq = ++seq_;
  p.t_ms = t_ms;
  p.step = p.first_step = step;
  p.epoch = epoch;
  p.loss = p.loss_min = p.loss_max = finite(loss);
  p.metrics = finite_metrics(metrics);
  json j = to_json(p);
  j["type"] = "progress";
  push_progress(std::move(p), 0);
  return append_line(j, t_ms);
}

status job_history::add_event(std::int64_t t_ms, history_event_kind kind, std::int64_t pid,
                              std::int64_t shard, std::int64_t step, std::string cause,
                              std::string detail) {
  history_event e;
  e.seq = ++seq_;
  e.t_ms = t_ms;
  e.kind = kind;
  e.pid = pid;
  e.shard = shard;
  e.step = step;
  e.cause = std::move(cause);
  e.detail = std::move(detail);
  json j = to_json(e);
  j["type"] = "event";
  push_event(std::move(e));
  // Events are few and say what happened to the job: written at once, with what was pending.
  if (auto a = append_line(j, t_ms); !a) return a;
  return flush();
}

std::optional<history_event_kind> state_change_event(job_state before, job_state after,
                                                     bool at_rest) {
  if (before == after) return std::nullopt;
  if (after == job_state::backoff) return history_event_kind::backoff;
  if (after == job_state::paused) return history_event_kind::pause;
  if (after == job_state::cancelled && at_rest) return history_event_kind::cancel;
  if ((before == job_state::paused || before == job_state::failed ||
       before == job_state::cancelled) &&
      !is_terminal(after)) {
    return history_event_kind::resume;
  }
  return std::nullopt;
}

status note_state_change(job_history& h, job_state before, const job_record& after,
                         std::int64_t now_ms, bool at_rest) {
  const auto kind = state_change_event(before, after.state, at_rest);
  if (!kind) return {};
  const std::int64_t pid = after.shards.empty() ? 0 : after.shards.back().pid;
  const std::int64_t shard = static_cast<std::int64_t>(after.shards.size()) - 1;
  switch (*kind) {
    case history_event_kind::backoff:
      return h.add_event(now_ms, *kind, pid, shard, after.checkpoint_step, {},
                         after.shards.empty() ? std::string() : after.shards.back().detail);
    case history_event_kind::pause:
      return h.add_event(now_ms, *kind, pid, shard, after.checkpoint_step, {}, after.diagnosis);
    default:
      return h.add_event(now_ms, *kind, 0, shard, after.checkpoint_step);
  }
}

history_page job_history::page(std::int64_t since) const {
  history_page p;
  p.since = since;
  p.next = seq_;
  for_each_oldest_first(rss_, [&](const history_rss& r, std::size_t) {
    if (r.seq > since) p.rss.push_back(r);
  });
  for_each_oldest_first(progress_, [&](const history_progress& x, std::size_t) {
    if (x.seq > since) p.progress.push_back(x);
  });
  for (const auto& e : events_) {
    if (e.seq > since) p.events.push_back(e);
  }
  return p;
}

std::size_t job_history::size() const {
  std::size_t n = events_.size();
  for (const auto& t : rss_) n += t.size();
  for (const auto& t : progress_) n += t.size();
  return n;
}

std::optional<history_rss> job_history::newest_rss() const {
  // Tier 0 is empty only before the first raw sample after a compacted load.
  for (const auto& t : rss_) {
    if (!t.empty()) return t.back();
  }
  return std::nullopt;
}

std::optional<history_event> job_history::newest_event(history_event_kind k) const {
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->kind == k) return *it;
  }
  return std::nullopt;
}

}  // namespace baton::supervisor
