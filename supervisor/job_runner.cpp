#include "supervisor/job_runner.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <limits>
#include <variant>

#include "os/read_parking.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_folder.h"
#include "protocol/checkpoint_store.h"
#include "protocol/messages.h"
#include "protocol/version.h"
#include "protocol/worker_line.h"
#include "supervisor/job_log.h"
#include "supervisor/leak_rate.h"
#include "supervisor/off_thread.h"
#include "supervisor/run_report.h"

namespace baton::supervisor {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::int64_t mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string shard_env_value(const protocol::shard_spec& s) { return std::to_string(s.count); }

// After a worker exits, a descendant may still hold its stdout open; the runner kills the group
// and waits this long for the pipe to drain before it moves on without it.
constexpr std::chrono::milliseconds drain_timeout{2000};
// A fork server's answer to a fork request: a fork of an idle process, milliseconds. The io
// thread waits for it (os/preload_server.h), so a server that stalls costs at most this.
constexpr std::chrono::milliseconds preload_fork_timeout{5000};

// The newest shard, if its worker died with an earlier supervisor and no exit was recorded.
void close_interrupted_shard(job_record& r, const std::string& why) {
  if (r.shards.empty() || r.shards.back().cause) return;
  auto& s = r.shards.back();
  s.cause = exit_cause::stopped;
  s.detail = why;
  s.ended_ms = std::max(s.started_ms, r.updated_ms);
  s.end_step = std::max(s.end_step, r.checkpoint_step);
  ++r.exits_by_cause[std::string(to_string(exit_cause::stopped))];
}

}  // namespace

void append_job_log(os::env& e, const job_store& store, const std::string& id,
                    const std::string& message, const log_limits& limits) {
  (void)job_log_writer(e, store.log_path(id), limits).add_line("[baton] " + message);
}

rest_outcome feed_job_at_rest(os::env& e, job_store& store, job_record& record, const event& ev) {
  rest_outcome out;
  const auto before = record.state;
  // At rest nothing reads the worker settings: no worker, no timer can be asked for.
  auto r = transition(record, job_runtime{}, ev, machine_settings{});
  out.ignored = r.ignored;
  static_cast<job_standing&>(record) = std::move(r.standing);
  // A resume or cancel at rest belongs in the history too. Its file is opened only then (a
  // load parses it), never for the recovery events every job gets at start.
  if (state_change_event(before, record.state, /*at_rest=*/true)) {
    auto h = job_history::open(e, job_history::file_in(store.job_dir(record.id)));
    const auto noted =
        h ? note_state_change(*h, before, record, unix_ms_now(), true) : status(h.error());
    if (!noted) append_job_log(e, store, record.id, "history: " + noted.error().message);
  }
  for (const auto& a : r.actions) {
    if (const auto* c = std::get_if<act::close_interrupted_shard>(&a)) {
      close_interrupted_shard(record, c->detail);
    } else if (const auto* l = std::get_if<act::log_event>(&a)) {
      append_job_log(e, store, record.id, l->message);
    } else if (std::holds_alternative<act::persist>(a)) {
      out.saved = store.save(record);
    } else if (std::holds_alternative<act::request_slot>(a)) {
      out.wants_slot = true;
    }
  }
  return out;
}

result<std::optional<protocol::verified_file>> verify_reported_checkpoint(
    os::env& e, const fs::path& checkpoint_dir, const std::string& path, std::int64_t step,
    const std::string& digest, std::uint64_t max_bytes) {
  const fs::path p = fs::path(path).lexically_normal();
  if (!p.is_absolute() || p.parent_path() != checkpoint_dir.lexically_normal()) {
    return make_error("checkpoint " + path + " is not a file in the job's checkpoint folder " +
                      checkpoint_dir.string());
  }
  auto file = e.new_untrusted_readable_file(p, {max_bytes, checkpoint_dir});
  if (!file) return file.error();
  auto sum = protocol::checkpoint_summary_streamed(
      [&](std::uint64_t offset, std::size_t n, std::string& buf) {
        return (*file)->read(offset, n, buf);
      },
      (*file)->size(), p.string(), protocol::folder_hash_chunk_bytes);
  if (!sum) return sum.error();
  if (sum->step != step) {
    return make_error("checkpoint " + path + " holds step " + std::to_string(sum->step) +
                      ", the worker announced step " + std::to_string(step));
  }
  if (sum->digest != digest) {
    return make_error("checkpoint " + path + " has digest " + sum->digest +
                      ", the worker announced " + digest);
  }
  // Trusted later from a stat only if the path still names the very file that was read.
  const auto read = (*file)->identity();
  const auto size = (*file)->size();
  file->reset();
  auto now = e.stat_no_follow(p);
  if (!read || !now || now->kind != os::entry_kind::regular || now->identity != read ||
      now->size != size) {
    return std::optional<protocol::verified_file>();
  }
  return std::optional<protocol::verified_file>(protocol::verified_file{p, step, size, *read});
}

std::vector<std::string> worker_log_tail_lines(os::env& e, const fs::path& log,
                                               const fs::path& job_dir, std::size_t max_lines) {
  constexpr std::size_t window = 8 << 10;
  constexpr std::size_t max_line = 300;
  std::vector<std::string> lines;  // newest first until the end
  if (max_lines == 0) return lines;
  // The log's folder is the job's: read_log_chunk opens every generation as untrusted inside it.
  if (log.parent_path().lexically_normal() != job_dir.lexically_normal()) return lines;
  auto last = read_log_chunk(e, log, 0, 0);
  if (!last) return lines;
  const auto size = last->size;
  const std::uint64_t from = size > window ? size - window : 0;
  // The window's first line is whole if the window starts the stream or its oldest kept byte
  // (generations hold whole lines).
  const bool whole_first = from <= last->start;
  std::string text;
  for (std::uint64_t at = from; at < size;) {
    auto c = read_log_chunk(e, log, at, static_cast<std::size_t>(size - at));
    if (!c || c->next_offset <= at) break;
    text += c->data;
    at = c->next_offset;
  }
  std::size_t end = text.size();
  while (end > 0 && lines.size() < max_lines) {
    const auto nl = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (starts_with_log_stamp(line)) line.erase(0, log_stamp_bytes);
    const bool ours = line.rfind("[baton]", 0) == 0;
    // The first line of the window may be cut; only a whole one counts.
    if (!line.empty() && !ours && (start > 0 || whole_first)) {
      if (line.size() > max_line) line = line.substr(0, max_line) + "...";
      lines.push_back(std::move(line));
    }
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

std::string worker_log_tail(os::env& e, const fs::path& log, const fs::path& job_dir) {
  auto lines = worker_log_tail_lines(e, log, job_dir, 1);
  return lines.empty() ? std::string() : std::move(lines.back());
}

fs::path staging_dir_for(const fs::path& checkpoint_dir, std::int64_t shard_index) {
  // Absolute: the worker runs in its own working folder and must announce an absolute path.
  std::error_code ec;
  const auto dir = checkpoint_dir / (".staging-" + std::to_string(shard_index));
  const auto abs = fs::absolute(dir, ec);
  return (ec ? dir : abs).lexically_normal();
}

status check_folder_announcement(os::env& e, const fs::path& staging_dir, const std::string& path,
                                 std::int64_t step, std::int64_t newest_step) {
  const fs::path raw(path);
  if (!raw.is_absolute()) return make_error("not an absolute path");
  const fs::path p = raw.lexically_normal();
  if (p.parent_path() != staging_dir.lexically_normal()) {
    return make_error("not a folder directly inside the staging folder " + staging_dir.string() +
                      " (BATON_STAGING_DIR)");
  }
  const std::string name = p.filename().string();
  const bool name_ok = !name.empty() && name.size() <= 64 && name.front() != '.' &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
                       });
  if (!name_ok) {
    return make_error("folder name \"" + name +
                      "\" is not 1-64 characters of [A-Za-z0-9._-] not starting with '.'");
  }
  if (step <= newest_step) {
    return make_error("step " + std::to_string(step) +
                      " does not advance past the newest verified checkpoint (step " +
                      std::to_string(newest_step) + ")");
  }
  auto info = e.stat_no_follow(p);
  if (!info) return info.error();
  switch (info->kind) {
    case os::entry_kind::directory:
      return {};
    case os::entry_kind::symlink:
      return make_error(p.string() + ": a symlink, not a folder");
    case os::entry_kind::missing:
      return make_error(p.string() + ": does not exist");
    case os::entry_kind::regular:
      return make_error(p.string() +
                        ": a file, not a folder (a checkpoint file is announced with its digest)");
    case os::entry_kind::other:
      break;
  }
  return make_error(p.string() + ": a special file, not a folder");
}

worker_invocation make_worker_invocation(const protocol::job_spec& spec, const job_store& store,
                                         const job_record& record, const fs::path& worker_exe,
                                         std::optional<std::int64_t> max_steps) {
  worker_invocation inv;
  const auto spec_file = store.spec_path(record.id).string();
  const auto ckpt_dir = store.checkpoint_dir(record.id).string();
  if (spec.worker.command) {
    inv.argv = *spec.worker.command;
    inv.working_dir = spec.worker.working_dir;
  } else {
    inv.argv = {worker_exe.string(), "--job", spec_file, "--checkpoint-dir", ckpt_dir};
    inv.working_dir = store.job_dir(record.id);
  }
  inv.env = {
      {"BATON_PROTOCOL_VERSION", std::to_string(protocol::protocol_version)},
      {"BATON_JOB_ID", record.id},
      {"BATON_JOB_FILE", spec_file},
      {"BATON_JOB_DIR", store.job_dir(record.id).string()},
      {"BATON_CHECKPOINT_DIR", ckpt_dir},
      {"BATON_SHARD_INDEX", std::to_string(record.shards.size())},
      {"BATON_START_STEP", std::to_string(record.checkpoint_step)},
      {spec.shard.unit == protocol::shard_unit::steps ? "BATON_SHARD_STEPS" : "BATON_SHARD_EPOCHS",
       shard_env_value(spec.shard)},
  };
  inv.env.emplace_back("BATON_STAGING_DIR",
                       staging_dir_for(store.checkpoint_dir(record.id),
                                       static_cast<std::int64_t>(record.shards.size()))
                           .string());
  if (!record.checkpoint_path.empty()) {
    std::error_code ec;
    const auto abs = fs::absolute(record.checkpoint_path, ec);
    inv.env.emplace_back("BATON_RESUME_FROM",
                         ec ? record.checkpoint_path : abs.lexically_normal().string());
  }
  if (max_steps) inv.env.emplace_back("BATON_MAX_STEPS", std::to_string(*max_steps));
  // The job's own variables (CUDA_VISIBLE_DEVICES per job); the spec keeps them off BATON_*.
  for (const auto& [name, value] : spec.worker.env) inv.env.emplace_back(name, value);
  if (spec.memory.hard_limit_mib) {
    const auto hard = static_cast<std::uint64_t>(*spec.memory.hard_limit_mib) << 20;
    inv.memory_backstop_bytes = hard + hard / 4;
  }
  return inv;
}

struct job_runner::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io_, os::env& files_, process_launcher& launcher_, job_store& store_,
       job_record record_, protocol::job_spec spec_, runner_options options_)
      : io(io_),
        files(files_),
        launcher(launcher_),
        store(store_),
        record(std::move(record_)),
        spec(std::move(spec_)),
        options(std::move(options_)),
        settings(machine_settings::from(spec)),
        timers{asio::steady_timer(io_), asio::steady_timer(io_), asio::steady_timer(io_),
               asio::steady_timer(io_)},
        rss_timer(io_),
        drain_timer(io_),
        log(files_, store_.log_path(record.id), options.log) {
    worker_group = record.id;
    // Reports reach the machine up to one read pace late.
    settings.shard_end_watch_ms += current_read_pace().count();
  }

  asio::io_context& io;
  os::env& files;
  process_launcher& launcher;
  job_store& store;
  job_record record;  // its job_standing is the machine's persisted state
  protocol::job_spec spec;
  runner_options options;
  machine_settings settings;
  job_runtime runtime;  // the machine's in-memory state
  live_status live;

  fs::path staging_dir;  // of the current worker; empty when none was created

  std::unique_ptr<worker_process> worker;
  // Where a worker's stderr goes: to the job's log once it is the current worker (gen set), held
  // in memory before that, while a worker started ahead waits its turn (its start-up lines then
  // reach the log in order, after the previous worker's last ones).
  struct stderr_route {
    std::optional<std::uint64_t> gen;
    std::string held;  // at most held_stderr_bytes; the rest is counted, not kept
    std::size_t dropped = 0;
    bool ended = false;
  };
  static constexpr std::size_t held_stderr_bytes = 64 * 1024;
  // The next worker, started ahead (act::start_ahead) while the current one saves: set up and
  // waiting for `resume`. The next spawn with the same max_steps makes it the current worker;
  // act::drop_ahead, a spawn that differs and the runner's end kill it.
  struct ahead_worker {
    std::unique_ptr<worker_process> process;
    std::optional<std::int64_t> max_steps;
    std::string group;
    std::shared_ptr<stderr_route> route;
    bool resumed = false;  // `resume` sent
  };
  std::optional<ahead_worker> ahead;
  // The current worker's containment group. A worker started ahead takes the job's other one, so
  // that the kill of everything left in the current worker's group, once it exits, cannot reach
  // it; after its turn the two swap.
  std::string worker_group;
  // worker.preload's fork server: started before the job's first shard (and again after it
  // failed), ended when the job rests. Shards are forked from it instead of spawned.
  std::unique_ptr<preload_parent> preload;
  std::string preload_stderr;    // its stderr's unfinished line
  std::uint64_t worker_gen = 0;  // handlers of an older worker see a newer generation and return
  bool stdout_done = false;
  std::optional<os::exit_status> exit_status;
  std::optional<protocol::done_msg> last_done;
  leak_tracker leak;  // this worker's steady part, from every sample at full resolution
  std::optional<std::int64_t> last_sample_ms;  // monotonic; this worker's newest sample

  // One per timer_kind (stall, grace, restart, budget); generations make cancelled waits
  // harmless.
  asio::steady_timer timers[4];
  std::uint64_t timer_gen[4] = {0, 0, 0, 0};
  asio::steady_timer rss_timer;
  asio::steady_timer drain_timer;
  job_log_writer log;        // after `record` and `options`, which it is made from
  bool stderr_done = false;  // the worker's stderr reached its end (or the drain gave up on it)

  // Worker input that arrived while a read of its files ran off the io thread: replayed in order
  // once the result is in, so the machine never sees a `done` or an exit before the checkpoint
  // that came first.
  struct held_line {
    boost::system::error_code ec;
    std::string line;
  };
  struct held_exit {
    boost::system::error_code ec;
    os::exit_status status;
  };
  std::deque<std::variant<held_line, held_exit>> held;
  bool reading = false;          // an off-thread read runs; worker input is held
  off_thread_call current_read;  // abandoned if the runner goes away first
  // The walk start() made, used by the spawn that follows it at once instead of a second walk.
  std::optional<result<protocol::verified_checkpoint>> fresh_walk;
  // The checkpoint file this runner verified on the worker's message (the record's), as it was
  // read: the walk before the next spawn answers it from a listing and a stat instead of reading
  // it again, while it is provably the same file. Empty after a rejection, when a walk had to
  // read or chose another file, and in a new runner (a daemon restart): the full check then.
  std::optional<protocol::verified_file> verified_newest;

  std::deque<event> pending;
  bool dispatching = false;
  bool persist_failed = false;
  bool rest_reported = false;
  bool closed = false;

  void log_event(const std::string& message) {
    if (options.on_event) options.on_event(message);
    (void)log.add_line("[baton] " + message);
  }

  // History is for people looking at the job: a write that fails is logged once, never fatal.
  bool history_failed = false;
  // The newest worker's last lines in the log (worker_log_tail_lines), read when it exited.
  std::vector<std::string> worker_tail;
  void noted(const status& s) {
    if (s || history_failed) return;
    history_failed = true;
    log_event("cannot write the job's history (kept in memory only): " + s.error().message);
  }

  void changed() {
    if (options.on_change) options.on_change();
  }

  // Events are handled one at a time, in order, even when an action raises a new one.
  void post_event(event e) {
    pending.push_back(std::move(e));
    if (dispatching) return;
    dispatching = true;
    while (!pending.empty()) {
      event next = std::move(pending.front());
      pending.pop_front();
      const auto before = record.state;
      auto r = transition(record, runtime, next, settings);
      static_cast<job_standing&>(record) = std::move(r.standing);
      runtime = std::move(r.runtime);
      for (const auto& a : r.actions) apply(a);
      if (options.history) {
        if (const auto* c = std::get_if<ev::checkpoint_verified>(&next); c && !r.ignored) {
          noted(options.history->add_event(unix_ms_now(), history_event_kind::checkpoint, live.pid,
                                           shard_index(), c->step));
        }
        noted(note_state_change(*options.history, before, record, unix_ms_now()));
      }
    }
    dispatching = false;
    changed();
    check_rest();
  }

  // One event outside the queue, for the runner's own use inside an action (see
  // choose_resume_checkpoint). Its transition must ask for no action.
  void feed_now(const event& e) {
    auto r = transition(record, runtime, e, settings);
    static_cast<job_standing&>(record) = std::move(r.standing);
    runtime = std::move(r.runtime);
    for (const auto& a : r.actions) apply(a);
  }

  void check_rest() {
    const bool rest =
        (is_terminal(record.state) || record.state == job_state::paused) && worker == nullptr;
    if (rest && !rest_reported) {
      rest_reported = true;
      rss_timer.cancel();
      preload.reset();  // a resting job keeps no fork server: a resume starts a new one
      if (options.on_rest) options.on_rest();
    }
  }

  void apply(const action& a) {
    std::visit([this](const auto& x) { apply_one(x); }, a);
  }

  // Runs `work` off the io thread (see off_thread.h), holding the worker's input until `then` has
  // run with its result on the io thread. `work` must not touch the runner.
  template <class T>
  void read_off_thread(std::string what, std::function<result<T>()> work,
                       std::function<void(result<T>)> then) {
    reading = true;
    std::weak_ptr<impl> weak = shared_from_this();
    current_read = run_off_thread<T>(io, options.verify_deadline, std::move(what), std::move(work),
                                     [weak, then = std::move(then)](result<T> r) {
                                       auto self = weak.lock();
                                       if (!self || self->closed) return;
                                       self->reading = false;
                                       self->current_read = {};
                                       then(std::move(r));  // may start the next read
                                       self->replay_held();
                                     });
  }

  void replay_held() {
    while (!reading && !held.empty() && !closed) {
      auto next = std::move(held.front());
      held.pop_front();
      if (auto* l = std::get_if<held_line>(&next)) {
        handle_line(l->ec, l->line);
      } else {
        const auto& x = std::get<held_exit>(next);
        handle_exit(x.ec, x.status);
      }
    }
  }

  // A machine event from inside an action (the spawn started by a transition): fed at once, so
  // the invocation built next sees its answer; otherwise posted as usual.
  void feed_or_post(const event& e) {
    if (dispatching) {
      feed_now(e);
    } else {
      post_event(e);
    }
  }

  void apply_one(const act::spawn_worker& x) { begin_spawn(x.max_steps); }

  void apply_one(const act::send_stop&) {
    if (!worker) return;
    worker->async_write_line(protocol::encode(protocol::supervisor_message{protocol::stop_msg{}}),
                             [self = shared_from_this()](const boost::system::error_code& ec) {
                               // A worker that already exited cannot read it; its exit decides.
                               if (ec) self->log_event("could not send stop: " + ec.message());
                             });
  }

  void apply_one(const act::kill_group&) { kill_worker_tree(); }

  void apply_one(const act::start_ahead& x) { start_ahead(x.max_steps); }

  void apply_one(const act::drop_ahead&) { drop_ahead("no worker follows this one now"); }
  void apply_one(const act::read_unpaced&) {
    if (worker) worker->read_unpaced();
  }

  void apply_one(const act::start_timer& t) {
    const auto k = static_cast<std::size_t>(t.kind);
    const auto gen = ++timer_gen[k];
    timers[k].expires_after(std::chrono::milliseconds(t.ms));
    timers[k].async_wait(
        [self = shared_from_this(), k, gen, kind = t.kind](const boost::system::error_code& ec) {
          if (ec || self->closed || self->timer_gen[k] != gen) return;
          switch (kind) {
            case timer_kind::stall:
              self->post_event(ev::stall_timeout{});
              break;
            case timer_kind::grace:
              self->post_event(ev::grace_elapsed{});
              break;
            case timer_kind::restart:
              self->post_event(ev::restart_due{});
              break;
            case timer_kind::budget:
              self->post_event(ev::budget_elapsed{});
              break;
          }
        });
  }

  void apply_one(const act::cancel_timer& t) {
    const auto k = static_cast<std::size_t>(t.kind);
    ++timer_gen[k];
    timers[k].cancel();
  }

  void apply_one(const act::record_exit& x) {
    if (record.shards.empty()) return;
    auto& shard = record.shards.back();
    if (shard.cause) return;  // already recorded (spawn failures record at once)
    shard.cause = x.cause;
    shard.detail =
        x.detail.empty() && x.cause != exit_cause::completed ? x.status.describe() : x.detail;
    shard.ended_ms = unix_ms_now();
    shard.end_step = record.checkpoint_step;
    // Too few samples leave the rate unset: "not enough samples", never a number from noise.
    if (auto rate = estimate_leak({leak.steady()})) {
      shard.leak_bytes_per_step = rate->bytes_per_step;
      shard.leak_ci95_bytes_per_step = rate->ci95_bytes_per_step;
    }
    ++record.exits_by_cause[std::string(to_string(x.cause))];
    if (options.history) {
      noted(options.history->add_event(shard.ended_ms, event_kind_for(x.cause), shard.pid,
                                       shard.index, shard.end_step, std::string(to_string(x.cause)),
                                       shard.detail));
    }
    const auto category = restart_category(x.cause);
    if (options.on_notice && !category.empty() && category != "user") {
      options.on_notice(
          "worker " + std::to_string(shard.pid) +
          (category == "recycle" ? " recycled: " : " failed: ") + std::string(to_string(x.cause)) +
          (shard.detail.empty() ? "" : " (" + shard.detail + ")") + ", steps " +
          std::to_string(shard.start_step) + "-" + std::to_string(shard.end_step) + ", peak " +
          format_mib(shard.peak_rss_bytes) + ", leak " +
          (shard.leak_bytes_per_step
               ? format_leak_mib(shard.leak_bytes_per_step, shard.leak_ci95_bytes_per_step) +
                     " MiB/step"
               : std::string("not enough samples")));
    }
    // A crash's own words are in the worker's log: say where, since the user will look next.
    const bool crashed = x.cause == exit_cause::crashed;
    log_event("worker " + std::to_string(shard.pid) + " ended: " + std::string(to_string(x.cause)) +
              (shard.detail.empty() ? "" : " (" + shard.detail + ")") +
              (record.checkpoint_path.empty() && record.checkpoint_step == 0
                   ? ", no checkpoint yet"
                   : ", checkpoint at step " + std::to_string(record.checkpoint_step)) +
              (crashed ? "; its output: " + store.log_path(record.id).string() : ""));
    // Its last words, for whoever watches the events (`baton run`): the log has them already.
    if (crashed && options.on_event) {
      for (const auto& line : worker_tail) options.on_event("  | " + line);
    }
  }

  void apply_one(const act::close_interrupted_shard& x) {
    close_interrupted_shard(record, x.detail);
  }
  void apply_one(const act::log_event& x) { log_event(x.message); }
  // The runner holds its slot already: a job queued again (a resume) starts at once.
  void apply_one(const act::request_slot&) {
    rest_reported = false;
    post_event(ev::start_requested{});
  }

  void apply_one(const act::persist&) {
    if (auto s = store.save(record); !s) {
      log_event("cannot save the job record: " + s.error().message);
      if (!persist_failed) {
        persist_failed = true;
        post_event(ev::save_failed{s.error().message});
      }
      return;
    }
    persist_failed = false;
  }

  void kill_worker_tree() {
    if (!worker) return;
    if (auto s = worker->kill_tree(); !s) log_event("kill: " + s.error().message);
  }

  // A walk of the checkpoint folder for the next spawn, off the io thread: the newest checkpoint
  // that verifies (the rejected ones moved aside, never resumed from) and no temp files left.
  std::function<result<protocol::verified_checkpoint>()> folder_walk() const {
    return [e = &files, dir = store.checkpoint_dir(record.id), keep = spec.checkpoints.keep,
            cap = options.max_checkpoint_bytes,
            known = verified_newest]() -> result<protocol::verified_checkpoint> {
      protocol::checkpoint_store cs(*e, dir, keep);
      auto v = cs.newest_verified({cap, true}, known);
      (void)cs.sweep_temp_files();  // best effort: the next save would sweep them too
      return v;
    };
  }

  // Whether the checkpoint folder names any checkpoint. A listing reads no file content; with
  // nothing to verify, the runner goes on at once on the io thread instead of a walk off it.
  bool has_checkpoints() const {
    protocol::checkpoint_store cs(files, store.checkpoint_dir(record.id), spec.checkpoints.keep);
    auto l = cs.list();
    return !l || !l->empty();
  }

  void begin_spawn(std::optional<std::int64_t> max_steps) {
    if (!spec.worker.preload.empty() && (!preload || !preload->usable())) {
      start_preload(max_steps);
      return;
    }
    if (fresh_walk) {
      auto v = std::move(*fresh_walk);
      fresh_walk.reset();
      finish_spawn(max_steps, std::move(v));
      return;
    }
    if (!has_checkpoints()) {
      finish_spawn(max_steps, folder_walk()());  // reads nothing: no checkpoint to verify
      return;
    }
    read_off_thread<protocol::verified_checkpoint>(
        "checking the checkpoints of job " + record.id, folder_walk(),
        [this, max_steps](result<protocol::verified_checkpoint> v) {
          finish_spawn(max_steps, std::move(v));
        });
  }

  // The fork server for worker.preload, as the job's user with the environment its shards get
  // (a library may read OMP_NUM_THREADS and the like at import). Its stderr goes to the job's
  // log a line at a time. Then begin_spawn again once it is ready; a server that fails is the
  // shard's spawn failure, with the server's reason.
  void start_preload(std::optional<std::int64_t> max_steps) {
    preload.reset();
    auto o = shard_options(max_steps);
    o.argv.resize(1);  // the interpreter; the server's own arguments are its business
    o.read_pace = std::chrono::milliseconds(0);
    o.on_stderr = [weak = weak_from_this()](const boost::system::error_code& ec,
                                            std::string_view data) {
      if (auto self = weak.lock(); self && !self->closed) self->on_preload_stderr(ec, data);
    };
    auto p = launcher.start_preload(io, o, spec.worker.preload);
    if (!p) {
      record_spawn_failure(new_shard(), p.error().message);
      return;
    }
    preload = std::move(*p);
    log_event("fork server " + std::to_string(preload->pid()) + " importing " +
              join_words(spec.worker.preload));
    preload->async_wait_ready(options.preload_ready_timeout,
                              [weak = weak_from_this(), max_steps](status s) {
                                auto self = weak.lock();
                                if (!self || self->closed) return;
                                if (!s) {
                                  self->preload.reset();
                                  self->record_spawn_failure(self->new_shard(), s.error().message);
                                  return;
                                }
                                self->log_event("fork server ready");
                                self->begin_spawn(max_steps);
                              });
  }

  void on_preload_stderr(const boost::system::error_code& ec, std::string_view data) {
    constexpr std::size_t max_line = 4096;
    preload_stderr.append(data);
    std::size_t nl;
    while ((nl = preload_stderr.find('\n')) != std::string::npos ||
           preload_stderr.size() > max_line || (ec && !preload_stderr.empty())) {
      const auto end = std::min({nl, preload_stderr.size(), max_line});
      log_event("fork server: " + preload_stderr.substr(0, end));
      preload_stderr.erase(0, end == nl ? end + 1 : end);
    }
  }

  static std::string join_words(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
    return out;
  }

  void finish_spawn(std::optional<std::int64_t> max_steps,
                    result<protocol::verified_checkpoint> v) {
    if (!v || !v->rejected.empty() || !v->path || !verified_newest ||
        v->path->lexically_normal() != verified_newest->path) {
      verified_newest.reset();
    }
    choose_resume_checkpoint(v);
    spawn(max_steps);
  }

  // A shard record for the spawn about to happen (its attempt counts retries of one start).
  shard_record new_shard() const {
    shard_record shard;
    shard.index = static_cast<std::int64_t>(record.shards.size());
    shard.start_step = record.checkpoint_step;
    shard.end_step = record.checkpoint_step;
    if (!record.shards.empty() && record.shards.back().start_step == shard.start_step) {
      shard.attempt = record.shards.back().attempt + 1;
    }
    shard.started_ms = unix_ms_now();
    return shard;
  }

  // Never slower than the RSS samples: a sample pairs the RSS with the step last read, and
  // several samples on one stale step would bend the leak fit into a staircase.
  std::chrono::milliseconds current_read_pace() const {
    return std::min(options.read_pace,
                    std::chrono::milliseconds(std::max<std::int64_t>(1, spec.memory.poll_ms)));
  }

  // What the next worker is started with: its invocation, the login's environment under the
  // job's own, its stderr through us.
  os::spawn_options shard_options(std::optional<std::int64_t> max_steps) {
    const auto inv = make_worker_invocation(spec, store, record, options.worker_exe, max_steps);
    os::spawn_options o;
    o.argv = inv.argv;
    o.env = options.login_env;
    o.env.insert(o.env.end(), inv.env.begin(), inv.env.end());
    o.working_dir = inv.working_dir;
    o.memory_backstop_bytes = inv.memory_backstop_bytes;
    o.read_pace = current_read_pace();
    o.group = worker_group;  // the job's cgroup: nothing the worker starts can leave it
    o.credentials = options.run_as;
    return o;
  }

  void record_spawn_failure(shard_record shard, const std::string& message) {
    remove_staging_dir();
    shard.cause = exit_cause::spawn_failed;
    shard.detail = message;
    shard.ended_ms = shard.started_ms;
    ++record.exits_by_cause[std::string(to_string(exit_cause::spawn_failed))];
    if (options.history) {
      noted(options.history->add_event(shard.ended_ms, history_event_kind::crash, 0, shard.index,
                                       shard.start_step, "spawn_failed", shard.detail));
    }
    record.shards.push_back(std::move(shard));
    log_event("cannot start worker: " + message);
    post_event(ev::spawn_failed{message, mono_ms()});
  }

  void spawn(std::optional<std::int64_t> max_steps) {
    const auto staging_error = prepare_staging_dir();
    shard_record shard = new_shard();
    auto o = shard_options(max_steps);
    // Through us, not to a file: stamped, rotated, cut, and never more than a chunk in memory.
    auto route = std::make_shared<stderr_route>();
    route->gen = worker_gen + 1;
    o.on_stderr = stderr_handler(route);
    std::optional<ahead_worker> turn;
    if (ahead && !staging_error && ahead->max_steps == max_steps) {
      turn = std::move(ahead);
      ahead.reset();
    } else if (ahead) {
      drop_ahead("its step budget changed");
    }
    auto p = staging_error ? result<std::unique_ptr<worker_process>>(*staging_error)
             : turn        ? result<std::unique_ptr<worker_process>>(std::move(turn->process))
             : preload     ? preload->fork(io, o, preload_fork_timeout)
                           : launcher.spawn(io, o);
    if (!p) {
      // A fork server that failed once is done with (os/preload_server.h): the next shard
      // starts another.
      if (preload && !preload->usable()) preload.reset();
      record_spawn_failure(std::move(shard), p.error().message);
      return;
    }
    worker = std::move(*p);
    const auto gen = ++worker_gen;
    if (turn) worker_group = turn->group;
    shard.pid = worker->pid();
    record.shards.push_back(std::move(shard));
    // On disk at once: if the supervisor dies during this shard, the next one must find the
    // worker in the history (and close it as stopped) rather than lose it.
    apply_one(act::persist{});
    stdout_done = false;
    stderr_done = false;
    if (turn) take_held_stderr(*turn->route, gen);
    exit_status.reset();
    last_done.reset();
    leak = {};
    last_sample_ms.reset();
    // The newest loss and epoch stay on show until the new worker reports its own.
    live.pid = worker->pid();
    live.rss_bytes = 0;
    live.samples_per_sec = 0.0;
    live.step = record.checkpoint_step;
    live.total_steps = record.total_steps;
    live.shard_started_step = record.checkpoint_step;
    live.shard_started_ms = mono_ms();
    log_event("worker " + std::to_string(worker->pid()) +
              (turn ? " (started ahead) takes over at step " : " started at step ") +
              std::to_string(record.checkpoint_step));
    if (options.history) {
      noted(options.history->add_event(record.shards.back().started_ms, history_event_kind::spawn,
                                       worker->pid(), shard_index(), record.checkpoint_step));
    }

    auto self = shared_from_this();
    worker->async_read_lines(
        [self, gen](const boost::system::error_code& ec, std::string_view line) {
          if (self->closed || gen != self->worker_gen) return;
          self->on_line(ec, line);
        });
    worker->async_wait([self, gen](const boost::system::error_code& ec, os::exit_status st) {
      if (self->closed || gen != self->worker_gen) return;
      self->on_exit(ec, st);
    });
    if (turn && !turn->resumed) send_resume(*worker);
    post_event(ev::worker_spawned{mono_ms()});
    arm_rss_timer(gen);
  }

  // Tells a worker started ahead to read the newest checkpoint and train. Sent as soon as its
  // predecessor's checkpoint is on disk, before our own check of it and that worker's exit, so
  // its read of the file overlaps both; its lines wait in the pipe until it is the current
  // worker. Should the check fail, the machine drops it (it saved nothing: no harm done). A
  // worker that died while it waited fails this write; its exit, once it is current, decides.
  void send_resume(worker_process& w) {
    w.async_write_line(protocol::encode(protocol::supervisor_message{protocol::resume_msg{}}),
                       [weak = weak_from_this()](const boost::system::error_code& ec) {
                         auto self = weak.lock();
                         if (ec && self && !self->closed) {
                           self->log_event("could not send resume: " + ec.message());
                         }
                       });
  }

  // The stderr handler of a worker whose lines take `route` (see stderr_route).
  os::chunk_handler stderr_handler(std::shared_ptr<stderr_route> route) {
    return [weak = weak_from_this(), route](const boost::system::error_code& ec,
                                            std::string_view data) {
      auto self = weak.lock();
      if (!self || self->closed) return;
      if (!route->gen) {
        if (ec) {
          route->ended = true;
        } else {
          const auto room = held_stderr_bytes - std::min(held_stderr_bytes, route->held.size());
          route->held.append(data.substr(0, room));
          route->dropped += data.size() - std::min(room, data.size());
        }
        return;
      }
      if (*route->gen != self->worker_gen) return;
      if (!ec) {
        (void)self->log.add_stream(data);
        return;
      }
      (void)self->log.end_stream();
      self->stderr_done = true;
      self->maybe_finish_worker();
    };
  }

  // A worker started ahead becomes the current one: what it wrote while it waited reaches the
  // log now, and from here on its stderr goes there directly.
  void take_held_stderr(stderr_route& route, std::uint64_t gen) {
    route.gen = gen;
    if (!route.held.empty()) (void)log.add_stream(route.held);
    if (route.dropped > 0) {
      (void)log.end_stream();
      log_event("(" + std::to_string(route.dropped) +
                " bytes of the worker's start-up output were not kept)");
    }
    route.held.clear();
    route.held.shrink_to_fit();
    if (route.ended) {
      (void)log.end_stream();
      stderr_done = true;
    }
  }

  // act::start_ahead: the next worker, as the next spawn would start it, but in the job's other
  // containment group, told to wait (BATON_START_AHEAD=1), and without BATON_START_STEP and
  // BATON_RESUME_FROM, which are not known before the current worker's checkpoint is.
  void start_ahead(std::optional<std::int64_t> max_steps) {
    if (ahead || closed) return;
    auto o = shard_options(max_steps);
    std::erase_if(o.env, [](const auto& kv) {
      return kv.first == "BATON_START_STEP" || kv.first == "BATON_RESUME_FROM";
    });
    o.env.emplace_back("BATON_START_AHEAD", "1");
    o.group = worker_group == record.id ? record.id + "/ahead" : record.id;
    auto route = std::make_shared<stderr_route>();
    o.on_stderr = stderr_handler(route);
    auto p = launcher.spawn(io, o);
    if (!p) {
      // Nothing lost: the next worker starts the usual way, after this one.
      log_event("cannot start the next worker ahead: " + p.error().message);
      return;
    }
    ahead = ahead_worker{std::move(*p), max_steps, o.group, std::move(route)};
  }

  void drop_ahead(const std::string& why) {
    if (!ahead) return;
    log_event("the worker started ahead (" + std::to_string(ahead->process->pid()) +
              ") is not needed: " + why);
    auto process = std::move(ahead->process);
    ahead.reset();
    // Waited for, so it is reaped once the kill lands; its status means nothing now.
    process->async_wait([](const boost::system::error_code&, os::exit_status) {});
    if (auto s = process->kill_tree(); !s) log_event("kill: " + s.error().message);
  }

  // Points the record (and so BATON_RESUME_FROM and BATON_START_STEP) at the newest checkpoint
  // that verifies now, just before a spawn: a checkpoint damaged since it was written is skipped,
  // and the step may go down.
  void choose_resume_checkpoint(const result<protocol::verified_checkpoint>& v) {
    if (!v) {
      log_event(v.error().message);
      return;
    }
    for (const auto& why : v->rejected) log_event("skipped checkpoint " + why);
    // Fed before the spawn: the invocation built next must see the machine's answer. Safe
    // because spawn_worker is the last action of every transition that asks for it.
    const auto step = v->path ? v->step : 0;
    feed_or_post(ev::resume_point{step});
    if (record.checkpoint_step == step) {
      record.checkpoint_path = v->path ? v->path->string() : std::string();
    }
  }

  // An empty BATON_STAGING_DIR for the next worker; an error means the spawn must not happen.
  std::optional<error> prepare_staging_dir() {
    staging_dir = staging_dir_for(store.checkpoint_dir(record.id),
                                  static_cast<std::int64_t>(record.shards.size()));
    if (auto s = files.remove_dir_all(staging_dir); !s) return s.error();
    if (auto s = files.create_dirs(staging_dir); !s) return s.error();
    if (const auto& u = options.run_as) {
      if (auto s = files.set_owner(staging_dir, u->uid, u->gid, 0700); !s) return s.error();
    }
    return std::nullopt;
  }

  void remove_staging_dir() {
    if (staging_dir.empty()) return;
    if (auto s = files.remove_dir_all(staging_dir); !s) {
      log_event("cannot remove the staging folder: " + s.error().message);
    }
    staging_dir.clear();
  }

  void on_line(const boost::system::error_code& ec, std::string_view line) {
    if (reading || !held.empty()) {
      held.push_back(held_line{ec, std::string(line)});
      return;
    }
    handle_line(ec, line);
  }

  void handle_line(const boost::system::error_code& ec, std::string_view line) {
    if (ec == boost::system::errc::message_size) {
      log_event("worker wrote a line over 1 MiB; cut");
      return;
    }
    if (ec) {
      stdout_done = true;
      maybe_finish_worker();
      return;
    }
    auto parsed = protocol::read_worker_line(line);
    if (!parsed.text.empty()) {
      // Not protocol: external trainers print logs and progress bars on stdout too. Keep them
      // in the job's log, before the message that followed them on the line.
      (void)log.add_line(parsed.text);
    }
    if (parsed.violation) {
      log_event("worker broke the protocol: " + parsed.violation->message);
      post_event(ev::protocol_violation{parsed.violation->message});
      return;
    }
    if (parsed.message) std::visit([this](const auto& m) { on_message(m); }, *parsed.message);
  }

  void on_message(const protocol::hello_msg& m) {
    if (auto s = protocol::check_protocol(m); !s) {
      log_event("worker refused: " + s.error().message);
      post_event(ev::protocol_violation{s.error().message});
      return;
    }
    post_event(ev::hello{mono_ms()});
    // A worker shorter than one poll interval still gets a peak: its start-up size, now.
    sample_rss();
  }

  // Before the exit that follows a checkpoint or `done`: the worker is at its largest then (the
  // checkpoint written), and a short worker may have had no timed sample at all.
  void sample_before_exit() {
    if (!worker || exit_status) return;
    if (last_sample_ms && mono_ms() - *last_sample_ms < 50) return;  // a flood of lines is not
    sample_rss();                                                    // a flood of /proc reads
  }

  void on_message(const protocol::progress_msg& m) {
    live.step = m.step;
    live.epoch = m.epoch;
    live.loss = m.loss;
    live.metrics = m.metrics;
    live.samples_per_sec = m.samples_per_sec;
    if (m.total_steps > 0) {
      live.total_steps = m.total_steps;
      record.total_steps = m.total_steps;
    }
    record.metrics = m.metrics;
    record.metrics["loss"] = m.loss;
    if (options.history) {
      noted(options.history->add_progress(unix_ms_now(), m.step, m.epoch, m.loss, m.metrics));
    }
    // The shard's end, if more is to come: the worker saves there (see ev::progress).
    std::optional<std::int64_t> shard_end;
    if (m.shard_end_step && (record.total_steps <= 0 || *m.shard_end_step < record.total_steps)) {
      shard_end = m.shard_end_step;
    }
    post_event(ev::progress{m.step, shard_end, mono_ms()});
  }

  void on_message(const protocol::checkpoint_msg& m) {
    sample_before_exit();
    if (ahead && !ahead->resumed && m.digest && m.step > record.checkpoint_step) {
      ahead->resumed = true;
      send_resume(*ahead->process);
    }
    if (!m.digest) {
      on_folder_checkpoint(m);
      return;
    }
    const auto dir = store.checkpoint_dir(record.id);
    // Off the io thread: the file is the worker's, and reading it may take long (or, without the
    // untrusted open, forever). A rejected file is moved aside so that no worker resumes from it.
    auto work = [e = &files, dir, m, cap = options.max_checkpoint_bytes,
                 keep = spec.checkpoints.keep]() -> result<std::optional<protocol::verified_file>> {
      auto s = verify_reported_checkpoint(*e, dir, m.path, m.step, *m.digest, cap);
      if (!s) {
        const fs::path p = fs::path(m.path).lexically_normal();
        std::string why = s.error().message;
        if (p.is_absolute() && p.parent_path() == dir.lexically_normal()) {
          auto there = e->stat_no_follow(p);
          if (there && there->kind != os::entry_kind::missing) {
            protocol::checkpoint_store cs(*e, dir, keep);
            auto moved = cs.move_aside(p, why);
            why += moved ? " (moved to " + moved->string() + ")"
                         : " (could not move it aside: " + moved.error().message + ")";
          }
        }
        return make_error(why);
      }
      return s;
    };
    read_off_thread<std::optional<protocol::verified_file>>(
        "verifying checkpoint " + m.path, std::move(work),
        [this, step = m.step, path = fs::path(m.path).lexically_normal()](
            result<std::optional<protocol::verified_file>> r) {
          if (!r) {
            verified_newest.reset();
            log_event("rejected checkpoint: " + r.error().message);
            post_event(ev::checkpoint_rejected{r.error().message});
            return;
          }
          // The step itself is the machine's (checkpoint_verified); the file and the shard's end
          // go with it.
          if (step >= record.checkpoint_step) {
            record.checkpoint_path = path.string();
            verified_newest = std::move(*r);
            if (!record.shards.empty()) record.shards.back().end_step = step;
          }
          post_event(ev::checkpoint_verified{step});
        });
  }

  // A folder announcement, handled before the next line of the worker is read: checked, sealed
  // into ckpt-<step>/, counted, pruned (protocol/README.md, "Folder checkpoints").
  void on_folder_checkpoint(const protocol::checkpoint_msg& m) {
    const auto dir = store.checkpoint_dir(record.id);
    verified_newest.reset();  // the newest checkpoint is a folder from now on, or a rejection
    const auto reject = [&](const error& why) {
      log_event("rejected checkpoint: " + m.path + ": " + why.message);
      post_event(ev::checkpoint_rejected{m.path + ": " + why.message});
    };
    if (staging_dir.empty()) return reject(make_error("this worker has no staging folder"));
    if (auto s =
            check_folder_announcement(files, staging_dir, m.path, m.step, record.checkpoint_step);
        !s) {
      return reject(s.error());
    }
    struct sealed_result {
      fs::path path;
      std::string prune_error;
    };
    // Hashing the folder reads everything the worker wrote: off the io thread, like a file's
    // verification. A folder that fails is moved aside; a seal that fails for space is not the
    // worker's fault and pauses the job instead.
    auto work = [e = &files, dir, staged = fs::path(m.path).lexically_normal(), id = record.id,
                 step = m.step, keep = spec.checkpoints.keep,
                 cap = options.max_checkpoint_bytes]() -> result<sealed_result> {
      auto sealed = protocol::seal_checkpoint_folder(*e, staged, dir, id, step, cap);
      protocol::checkpoint_store cs(*e, dir, keep);
      if (!sealed) {
        if (sealed.error().code == errc::no_space) return sealed.error();
        std::string why = sealed.error().message;
        auto there = e->stat_no_follow(staged);
        if (there && there->kind != os::entry_kind::missing) {
          auto moved = cs.move_aside(staged, why);
          if (moved) why += " (moved to " + moved->string() + ")";
        }
        return make_error(why);
      }
      sealed_result out{sealed->path, {}};
      if (auto s = cs.prune(sealed->path); !s) out.prune_error = s.error().message;
      return out;
    };
    read_off_thread<sealed_result>(
        "sealing checkpoint folder " + m.path, std::move(work), [this, m](result<sealed_result> r) {
          if (!r) {
            if (r.error().code == errc::no_space) {
              log_event("cannot seal checkpoint " + m.path + ": " + r.error().message);
              post_event(ev::save_failed{r.error().message});
              return;
            }
            log_event("rejected checkpoint: " + m.path + ": " + r.error().message);
            post_event(ev::checkpoint_rejected{m.path + ": " + r.error().message});
            return;
          }
          // The step itself is the machine's (checkpoint_verified below).
          record.checkpoint_path = r->path.string();
          if (!record.shards.empty()) record.shards.back().end_step = m.step;
          if (!r->prune_error.empty()) {
            log_event("sealed " + r->path.string() + " but pruning failed: " + r->prune_error);
          }
          post_event(ev::checkpoint_verified{m.step});
        });
  }

  void on_message(const protocol::done_msg& m) {
    sample_before_exit();
    last_done = m;
    if (m.job_complete && m.step > 0) record.total_steps = std::max(record.total_steps, m.step);
  }

  void on_message(const protocol::error_msg& m) {
    log_event("worker error: " + m.message);
    if (!record.shards.empty()) record.shards.back().detail = m.message;
    post_event(ev::worker_error{m.message});
  }

  void on_exit(const boost::system::error_code& ec, os::exit_status st) {
    if (reading || !held.empty()) {
      held.push_back(held_exit{ec, st});
      return;
    }
    handle_exit(ec, st);
  }

  void handle_exit(const boost::system::error_code& ec, os::exit_status st) {
    if (ec) {
      log_event("waiting for the worker failed: " + ec.message());
      st = os::exit_status::signaled(9);
    }
    exit_status = st;
    if (!stdout_done || !stderr_done) {
      // Whatever still holds a pipe belongs to the dead worker: kill it, then give the pipes a
      // moment to deliver what was already written (a traceback on stderr is the diagnosis);
      // never longer, whatever a descendant that escaped the kill keeps open.
      kill_worker_tree();
      drain_timer.expires_after(drain_timeout);
      drain_timer.async_wait(
          [self = shared_from_this(), gen = worker_gen](const boost::system::error_code& e) {
            if (e || self->closed || gen != self->worker_gen) return;
            self->stdout_done = true;
            self->stderr_done = true;
            self->maybe_finish_worker();
          });
    }
    maybe_finish_worker();
  }

  void maybe_finish_worker() {
    if (!stdout_done || !stderr_done || !exit_status || !worker) return;
    drain_timer.cancel();
    rss_timer.cancel();
    // Nothing of the worker may outlive it: its group and any escaped descendants go too.
    kill_worker_tree();
    ++worker_gen;
    worker.reset();
    (void)log.end_stream();  // an unfinished last stderr line the drain gave up waiting on
    remove_staging_dir();
    live.pid = 0;
    live.rss_bytes = 0;
    ev::worker_exited exited;
    exited.status = *exit_status;
    exited.last_done = last_done;
    exited.now_ms = mono_ms();
    exited.total_steps = record.total_steps;
    worker_tail = worker_log_tail_lines(files, store.log_path(record.id), store.job_dir(record.id),
                                        crash_tail_lines);
    exited.stderr_tail = worker_tail.empty() ? std::string() : worker_tail.back();
    // After the worker: its killed writes' temp files go, and if the record's checkpoint went
    // with it (a worker that pruned or replaced it), the newest one that verifies takes its place.
    auto after = [e = &files, dir = store.checkpoint_dir(record.id), keep = spec.checkpoints.keep,
                  cap = options.max_checkpoint_bytes, current = record.checkpoint_path]()
        -> result<std::optional<protocol::verified_checkpoint>> {
      protocol::checkpoint_store cs(*e, dir, keep);
      (void)cs.sweep_temp_files();
      if (current.empty()) return std::optional<protocol::verified_checkpoint>();
      auto there = e->stat_no_follow(current);
      if (there &&
          (there->kind == os::entry_kind::regular || there->kind == os::entry_kind::directory)) {
        return std::optional<protocol::verified_checkpoint>();
      }
      auto v = cs.newest_verified({cap, true});
      if (!v) return v.error();
      return std::optional<protocol::verified_checkpoint>(std::move(*v));
    };
    auto then = [this, exited](result<std::optional<protocol::verified_checkpoint>> r) mutable {
      if (!r) {
        log_event(r.error().message);
      } else if (*r) {
        verified_newest.reset();  // the record's file is gone: it was not the one kept
        const auto& v = **r;
        for (const auto& why : v.rejected) log_event("skipped checkpoint " + why);
        log_event("the checkpoint " + record.checkpoint_path +
                  " is gone; the newest that verifies is " +
                  (v.path ? v.path->string() : std::string("none")));
        record.checkpoint_path = v.path ? v.path->string() : std::string();
        exited.checkpoint_now = v.path ? v.step : 0;
      }
      post_event(exited);
    };
    // Only a record whose file is gone needs a walk (reads); the sweep alone is a listing.
    bool gone = false;
    if (!record.checkpoint_path.empty()) {
      auto there = files.stat_no_follow(record.checkpoint_path);
      gone = there && there->kind != os::entry_kind::regular &&
             there->kind != os::entry_kind::directory;
    }
    if (!gone) {
      then(after());
      return;
    }
    read_off_thread<std::optional<protocol::verified_checkpoint>>(
        "checking the checkpoints after worker " +
            std::to_string(record.shards.empty() ? 0 : record.shards.back().pid),
        std::move(after), std::move(then));
  }

  void arm_rss_timer(std::uint64_t gen) {
    // On the next multiple of poll_ms of the steady clock, not poll_ms from now: every job with
    // the same poll interval then samples on the same tick, which the io_context serves in one
    // wakeup (the daemon's CPU is mostly wakeups: 8 jobs at 4 Hz were 32 a second, now 4).
    const auto poll = std::chrono::milliseconds(std::max<std::int64_t>(1, spec.memory.poll_ms));
    rss_timer.expires_at(os::next_tick(std::chrono::steady_clock::now(), poll));
    rss_timer.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
      if (ec || self->closed || gen != self->worker_gen || !self->worker) return;
      self->sample_rss();
      if (self->worker && gen == self->worker_gen) self->arm_rss_timer(gen);
    });
  }

  void sample_rss() {
    if (!worker || exit_status) return;
    auto rss = worker->rss_bytes();
    if (!rss) return;  // the process may be exiting; its exit decides what happens
    live.rss_bytes = *rss;
    const auto now = mono_ms();
    leak.add(live.step, *rss);
    last_sample_ms = now;
    if (!record.shards.empty()) {
      auto& shard = record.shards.back();
      add_rss_point(shard,
                    {now - live.shard_started_ms, static_cast<std::int64_t>(*rss), live.step});
    }
    if (options.history) {
      noted(options.history->add_rss(unix_ms_now(), live.pid, shard_index(), live.step, *rss));
    }
    post_event(ev::rss_sample{*rss});
  }

  std::int64_t shard_index() const {
    return record.shards.empty() ? -1 : record.shards.back().index;
  }
};

job_runner::job_runner(asio::io_context& io, os::env& e, process_launcher& launcher,
                       job_store& store, job_record record, protocol::job_spec spec,
                       runner_options options)
    : impl_(std::make_shared<impl>(io, e, launcher, store, std::move(record), std::move(spec),
                                   std::move(options))) {}

job_runner::~job_runner() {
  impl_->closed = true;
  impl_->current_read.abandon();
  impl_->kill_worker_tree();
  if (impl_->ahead) {
    (void)impl_->ahead->process->kill_tree();
    impl_->ahead.reset();
  }
  for (auto& t : impl_->timers) t.cancel();
  impl_->rss_timer.cancel();
  impl_->drain_timer.cancel();
}

void job_runner::start() {
  auto& m = *impl_;
  // The record may lag the disk (a supervisor killed between a checkpoint and its record), or
  // point at a file that is gone: the newest checkpoint that verifies is the truth. Off the io
  // thread, like every read of what a worker wrote; the spawn that follows uses this walk.
  struct start_walk {
    result<protocol::verified_checkpoint> newest = protocol::verified_checkpoint{};
    bool record_file_gone = false;
    std::vector<std::string> notes;
  };
  auto work = [e = &m.files, dir = m.store.checkpoint_dir(m.record.id),
               keep = m.spec.checkpoints.keep, cap = m.options.max_checkpoint_bytes,
               current = m.record.checkpoint_path]() -> result<start_walk> {
    start_walk out;
    protocol::checkpoint_store cs(*e, dir, keep);
    // Staging folders and temp files are a dead worker's (or writer's) leftovers: no worker of
    // this job runs yet.
    if (e->file_exists(dir)) {
      if (auto names = e->list_dir(dir)) {
        for (const auto& n : *names) {
          if (n.rfind(".staging-", 0) != 0) continue;
          if (auto s = e->remove_dir_all(dir / n); !s) {
            out.notes.push_back("cannot remove a stale staging folder: " + s.error().message);
          }
        }
      }
    }
    if (auto swept = cs.sweep_temp_files(); !swept) {
      out.notes.push_back("cannot remove stale temp files: " + swept.error().message);
    } else if (*swept > 0) {
      out.notes.push_back("removed " + std::to_string(*swept) + " stale temp file(s) from " +
                          dir.string());
    }
    out.newest = cs.newest_verified({cap, true});
    if (!current.empty()) {
      auto there = e->stat_no_follow(current);
      out.record_file_gone = there && there->kind != os::entry_kind::regular &&
                             there->kind != os::entry_kind::directory;
    }
    return out;
  };
  auto then = [&m](result<start_walk> w) {
    auto& r = m.record;
    if (!w) {
      m.log_event(w.error().message);
    } else {
      for (const auto& n : w->notes) m.log_event(n);
      if (w->newest) {
        const auto& v = *w->newest;
        const auto step = v.path ? v.step : 0;
        const bool replaces = w->record_file_gone;
        const auto before = r.checkpoint_step;
        m.post_event(ev::checkpoint_found{step, replaces});
        if (r.checkpoint_step != before || replaces) {
          r.checkpoint_path = v.path && r.checkpoint_step == step ? v.path->string() : "";
        }
      } else {
        m.log_event(w->newest.error().message);
      }
      m.fresh_walk = std::move(w->newest);
    }
    m.live.step = r.checkpoint_step;
    m.live.total_steps = r.total_steps;
    m.post_event(ev::start_requested{});
    m.fresh_walk.reset();  // a spawn it started has used it; a resting job needs none
  };
  if (!m.has_checkpoints()) {
    then(work());  // nothing to verify: no file is read, so no reason to leave the io thread
    return;
  }
  m.read_off_thread<start_walk>("checking the checkpoints of job " + m.record.id, std::move(work),
                                std::move(then));
}

void job_runner::cancel() { impl_->post_event(ev::cancel_requested{}); }
void job_runner::pause(std::string reason) {
  impl_->post_event(ev::pause_requested{std::move(reason)});
}
// The daemon's `baton resume`: a failed job resumes too.
void job_runner::resume() { impl_->post_event(ev::resume_requested{true}); }

bool job_runner::at_rest() const { return impl_->rest_reported; }
const job_record& job_runner::record() const { return impl_->record; }
const live_status& job_runner::live() const { return impl_->live; }
const job_runtime& job_runner::runtime() const { return impl_->runtime; }

}  // namespace baton::supervisor
