#include "supervisor/client_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "os/env.h"
#include "os/peer_credentials.h"
#include "os/system.h"
#include "protocol/job_overrides.h"
#include "supervisor/control_client.h"
#include "supervisor/control_server.h"
#include "supervisor/job_log.h"
#include "supervisor/run_report.h"
#include "supervisor/socket_discovery.h"
#include "supervisor/terminal_style.h"

namespace baton::supervisor {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace baton::supervisor;

namespace {

struct client_options {
  std::string socket;
  std::string id;
  bool json = false;
};

void add_socket_option(CLI::App* cmd, client_options& o) {
  cmd->add_option("--socket", o.socket,
                  "Daemon control socket; on Windows its control endpoint file (default: "
                  "$BATON_SOCKET, else your own daemon's socket if it answers, else "
                  "/run/baton/baton.sock; Windows: %ProgramData%\\baton\\control-endpoint.json)");
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

bool is_terminal_name(const std::string& s) {
  return s == "completed" || s == "failed" || s == "cancelled";
}

// An HTTP error answer as one message: the daemon's {"error"}, else the status code.
std::string error_text(const api_response& r) {
  if (r.body.is_object()) {
    if (auto it = r.body.find("error"); it != r.body.end() && it->is_string()) {
      return it->get<std::string>();
    }
  }
  return "the baton daemon answered HTTP " + std::to_string(r.status);
}

// One call; prints transport and HTTP errors and returns nullopt on them.
std::optional<json> call(cli_context& ctx, const client_options& o, std::string_view method,
                         const std::string& target, const json& body = nullptr,
                         int* http_status = nullptr) {
  const auto where = resolve_client_choice(o.socket);
  auto r = control_client::call(where.path, method, target, body);
  if (!r) {
    ctx.err << error_prefix(ctx.colour_err()) << unreachable_message(where, r.error().message)
            << "\n";
    return std::nullopt;
  }
  if (http_status) *http_status = r->status;
  if (r->status < 200 || r->status >= 300) {
    ctx.err << error_prefix(ctx.colour_err()) << error_text(*r) << "\n";
    return std::nullopt;
  }
  return std::move(r->body);
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::int64_t num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<std::int64_t>() : 0;
}

// A field the daemon may send as null (a loss before the first report, a leak rate with too few
// samples) or not at all: never json::value(), which throws on a null that is there.
std::optional<double> real(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

const json& member(const json& j, const char* key) {
  static const json none;
  const auto it = j.find(key);
  return it == j.end() ? none : *it;
}

}  // namespace

namespace {

// The real sockets: a daemon "accepts" when it gives any HTTP answer to a health check, within
// a second (a stale socket file refuses at once).
class live_socket_probe final : public socket_probe {
 public:
  explicit live_socket_probe(os::env& e) : env_(e) {}
  bool exists(const fs::path& socket) const override { return env_.file_exists(socket); }
  bool accepts(const fs::path& socket) const override {
    return control_client::call(socket, "GET", "/v1/health", nullptr, std::chrono::seconds(1))
        .has_value();
  }

 private:
  os::env& env_;
};

}  // namespace

socket_choice resolve_client_choice(const std::string& flag) {
  socket_search s;
  s.flag = flag;
  s.env_socket = os::get_env("BATON_SOCKET");
  const auto xdg = os::get_env("XDG_RUNTIME_DIR");
  s.own_socket = default_socket_path(os::current_uid(), xdg ? xdg->c_str() : nullptr);
  if (native_control_transport() == control_transport::tcp_loopback) {
    s.system_socket = s.own_socket;  // Windows: one machine-wide endpoint file
  } else if (auto sys = os::get_env("BATON_SYSTEM_SOCKET"); sys && !sys->empty()) {
    s.system_socket = *sys;
  } else {
    s.system_socket = system_socket_path;
  }
  return discover_socket(s, live_socket_probe(os::env::default_env()));
}

fs::path resolve_client_socket(const std::string& flag) { return resolve_client_choice(flag).path; }

std::string format_job_status(const json& s, bool colour) {
  std::ostringstream o;
  const std::string state = str(s, "state");
  o << "job " << str(s, "id") << " (" << str(s, "name") << "): " << paint_state(state, colour);
  if (!str(s, "diagnosis").empty()) o << " (" << str(s, "diagnosis") << ")";
  if (auto q = s.find("queue_position"); q != s.end()) o << ", position " << *q << " in the queue";
  o << "\n";
  // What the worker said last, and where the rest is: the next thing a user reads on a crash.
  if (const auto& tail = member(s, "log_tail"); tail.is_array() && !tail.empty()) {
    o << "  last lines of " << str(s, "log_path") << ":\n";
    for (const auto& line : tail) {
      if (line.is_string()) o << "    " << line.get<std::string>() << "\n";
    }
  }
  const auto total = num(s, "total_steps");
  const auto step = num(s, "step");
  o << "  step " << step;
  if (total > 0) {
    o << "/" << total << " (" << fixed(100.0 * static_cast<double>(step) / total, 1) << "%)";
  }
  const auto live = s.find("live");
  if (live != s.end() && live->is_object() && num(*live, "pid") != 0) {
    o << ", epoch " << num(*live, "epoch") + 1;
    if (const auto loss = real(*live, "loss")) o << ", loss " << fixed(*loss, 4);
    if (const auto& metrics = member(*live, "metrics"); metrics.is_object()) {
      for (const auto& [k, v] : metrics.items()) {
        if (v.is_number()) o << ", " << k << " " << fixed(v.get<double>(), 4);
      }
    }
    o << "\n  worker pid " << num(*live, "pid") << ", rss " << format_mib(num(*live, "rss_bytes"));
  }
  o << "\n";
  o << "  memory limits: soft "
    << (real(s, "soft_limit_mib") ? std::to_string(num(s, "soft_limit_mib")) + " MiB" : "none")
    << ", hard "
    << (real(s, "hard_limit_mib") ? std::to_string(num(s, "hard_limit_mib")) + " MiB" : "none")
    << "; peak RSS "
    << (num(s, "peak_rss_bytes") > 0 ? format_mib(num(s, "peak_rss_bytes")) : "not measured yet")
    << "\n";
  if (const auto leak = real(s, "leak_bytes_per_step")) {
    o << "  leak " << format_leak_mib(*leak, real(s, "leak_ci95_bytes_per_step"))
      << " MiB/step (95% interval, steady part of " << num(s, "leak_workers") << " worker"
      << (num(s, "leak_workers") == 1 ? "" : "s") << ")\n";
  } else if (const std::string note = str(s, "leak_note"); !note.empty()) {
    o << "  leak: " << note << "\n";
  }
  if (const auto& r = member(s, "restarts"); r.is_object()) {
    o << "  restarts: "
      << format_restarts({static_cast<int>(num(r, "recycle")), static_cast<int>(num(r, "failure")),
                          static_cast<int>(num(r, "user"))})
      << "\n";
  }
  if (const auto c = s.find("containment"); c != s.end() && c->is_string()) {
    o << "  containment: " << c->get<std::string>()
      << (*c == "process-group" ? " (no cgroup: a worker's escapees may go unseen)" : "") << "\n";
  }
  const std::string ckpt = str(s, "checkpoint_path");
  o << "  checkpoint: "
    << (ckpt.empty() ? "(none yet)"
                     : "step " + std::to_string(num(s, "checkpoint_step")) + " at " + ckpt)
    << "\n";
  const auto& shards = member(s, "shards");
  if (shards.is_array() && !shards.empty()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %5s %7s %7s %8s %8s  %-13s %9s %16s  %s\n", "shard",
                  "attempt", "pid", "from", "to", "exit", "peak MiB", "leak MiB/step", "detail");
    o << line;
    for (const auto& sh : shards) {
      if (!sh.is_object()) continue;
      const auto& cause = member(sh, "cause");
      const std::string leak =
          format_leak_mib(real(sh, "leak_bytes_per_step"), real(sh, "leak_ci95_bytes_per_step"));
      // The exit column is padded by paint_state: its escape codes have no width.
      const std::string exit =
          paint_state(cause.is_string() ? cause.get<std::string>() : "running", colour, 13);
      std::snprintf(
          line, sizeof line, "  %5lld %7lld %7lld %8lld %8lld  %s %9s %16s  %s\n",
          static_cast<long long>(num(sh, "index")), static_cast<long long>(num(sh, "attempt")),
          static_cast<long long>(num(sh, "pid")), static_cast<long long>(num(sh, "start_step")),
          static_cast<long long>(num(sh, "end_step")), exit.c_str(),
          format_peak_mib(num(sh, "peak_rss_bytes")).c_str(),
          cause.is_string() ? leak.c_str() : "-", str(sh, "detail").c_str());
      o << line;
    }
  }
  o << "  exits:";
  const auto& exits = member(s, "exits_by_cause");
  if (!exits.is_object() || exits.empty()) o << " none";
  if (exits.is_object()) {
    for (const auto& [cause, count] : exits.items()) o << " " << cause << " " << count;
  }
  o << "\n";
  return o.str();
}

std::string sparkline(const std::vector<double>& values, std::size_t width) {
  static constexpr const char* blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                           "\u2585", "\u2586", "\u2587", "\u2588"};
  std::vector<double> finite;
  for (double v : values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  if (finite.empty() || width == 0) return {};
  const std::size_t n = std::min(width, finite.size());
  std::vector<double> cols(n, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < finite.size(); ++i) {
    auto& c = cols[i * n / finite.size()];
    c = std::max(c, finite[i]);
  }
  const auto [lo, hi] = std::minmax_element(finite.begin(), finite.end());
  std::string out;
  for (double v : cols) {
    const double f = *hi > *lo ? (v - *lo) / (*hi - *lo) : 0.0;
    out += blocks[std::clamp(static_cast<int>(f * 7.0 + 0.5), 0, 7)];
  }
  return out;
}

std::string format_job_history(const json& s, const json& h, std::int64_t now_ms) {
  std::ostringstream o;
  const auto created = num(s, "created_ms");
  const bool over = is_terminal_name(str(s, "state"));
  const auto end = over ? num(s, "updated_ms") : now_ms;
  if (created > 0 && end >= created) {
    o << "  elapsed " << format_duration(static_cast<double>(end - created) / 1000.0);
  }
  // ETA from the rate over the progress reports on show (at most the newest few hundred).
  const auto& progress = member(h, "progress");
  const auto total = num(s, "total_steps");
  if (!over && progress.is_array() && progress.size() >= 2 && total > 0) {
    const auto& a = progress.front();
    const auto& b = progress.back();
    const double dt = static_cast<double>(num(b, "t_ms") - num(a, "t_ms")) / 1000.0;
    const double dsteps = static_cast<double>(num(b, "step") - num(a, "step"));
    if (dt > 0 && dsteps > 0 && total > num(b, "step")) {
      o << ", ETA " << format_duration(static_cast<double>(total - num(b, "step")) * dt / dsteps);
    }
  }
  if (o.tellp() > 0) o << "\n";
  const auto& rss = member(h, "rss");
  if (rss.is_array() && !rss.empty()) {
    std::map<std::int64_t, std::vector<double>> by_worker;  // by shard index, oldest first
    std::map<std::int64_t, std::int64_t> pid_of;
    for (const auto& r : rss) {
      if (!r.is_object()) continue;
      by_worker[num(r, "shard")].push_back(static_cast<double>(num(r, "bytes")));
      pid_of[num(r, "shard")] = num(r, "pid");
    }
    std::size_t skip = by_worker.size() > 6 ? by_worker.size() - 6 : 0;
    if (skip > 0) o << "  (" << skip << " older workers not shown)\n";
    for (const auto& [shard, values] : by_worker) {
      if (skip > 0) {
        --skip;
        continue;
      }
      const double peak = *std::max_element(values.begin(), values.end());
      char line[96];
      std::snprintf(line, sizeof line, "  rss  shard %-4lld pid %-7lld ",
                    static_cast<long long>(shard), static_cast<long long>(pid_of[shard]));
      o << line << sparkline(values, 40) << " peak " << format_mib(static_cast<std::int64_t>(peak))
        << "\n";
    }
  }
  if (progress.is_array()) {
    std::vector<double> losses;
    for (const auto& p : progress) {
      if (const auto l = real(p, "loss")) losses.push_back(*l);
    }
    if (!losses.empty()) {
      o << "  loss " << std::string(23, ' ') << sparkline(losses, 40) << " now "
        << fixed(losses.back(), 4) << "\n";
    }
  }
  return o.str();
}

std::string format_job_list(const json& list, bool colour) {
  std::ostringstream o;
  const auto& jobs = member(list, "jobs");
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-10s %15s %7s %10s  %s\n", "ID", "STATE", "STEP",
                "WORKERS", "RSS", "DIAGNOSIS");
  o << line;
  for (const auto& j : jobs) {
    if (!j.is_object()) continue;
    std::string step = std::to_string(num(j, "step"));
    if (num(j, "total_steps") > 0) step += "/" + std::to_string(num(j, "total_steps"));
    const auto rss = num(j, "rss_bytes");
    std::snprintf(line, sizeof line, "%-32s %s %15s %7lld %10s  %s\n", str(j, "id").c_str(),
                  paint_state(str(j, "state"), colour, 10).c_str(), step.c_str(),
                  static_cast<long long>(num(j, "workers")),
                  rss > 0 ? format_mib(rss).c_str() : "-", str(j, "diagnosis").c_str());
    o << line;
  }
  return o.str();
}

void add_submit_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand(
      "submit", "Send a job config to the daemon; prints the new job's id (exit 2 if invalid)");
  cmd->add_option("CONFIG", *config, "Job config file (JSON)")->required();
  cmd->add_option("--set", *sets,
                  "Override a field of the job file, typed by the spec: PATH=VALUE, e.g. "
                  "training.optimizer.learning_rate=0.01 (repeatable)")
      ->take_all();
  cmd->add_flag("--json", o->json, "Print {\"id\": ...} instead of the bare id");
  add_socket_option(cmd, *o);
  cmd->callback([o, config, sets, &ctx] {
    ctx.exit_code = exit_invalid;
    std::vector<protocol::job_override> overrides;
    for (const auto& arg : *sets) {
      auto parsed = protocol::parse_override(arg);
      if (!parsed) {
        ctx.err << parsed.error().message << "\n";
        return;
      }
      overrides.push_back(std::move(*parsed));
    }
    std::error_code ec;
    const fs::path file = fs::absolute(*config, ec);
    auto text = ctx.environment.read_file(ec ? fs::path(*config) : file);
    if (!text) {
      ctx.err << *config << ": " << text.error().message << "\n";
      return;
    }
    // The daemon checks the spec; locally only what must hold to send it at all.
    auto doc = parse_json_limited(*text);
    if (!doc) {
      ctx.err << *config << ": " << doc.error().message << "\n";
      return;
    }
    if (!doc->is_object()) {
      ctx.err << *config << ": a job config must be a JSON object\n";
      return;
    }
    // Applied here, checked by the daemon with every other field.
    auto changed = protocol::apply_overrides(std::move(*doc), overrides);
    if (!changed) {
      ctx.err << *config << ": " << changed.error().message << "\n";
      return;
    }
    *doc = std::move(*changed);
    // Relative paths in the job mean "next to the job file", wherever the daemon runs.
    json body = {{"spec", std::move(*doc)},
                 {"base_dir", (ec ? fs::path(*config) : file).parent_path().string()}};
    // Ours, so that a worker that runs as us finds `python3` where our shell does (the daemon's
    // PATH is a service manager's).
    if (const auto path = os::get_env("PATH")) body["path"] = *path;
    const auto where = resolve_client_choice(o->socket);
    auto r = control_client::call(where.path, "POST", "/v1/jobs", body);
    if (!r) {
      ctx.err << error_prefix(ctx.colour_err()) << unreachable_message(where, r.error().message)
              << "\n";
      ctx.exit_code = exit_failure;
      return;
    }
    if (r->status == 400) {
      const auto errors = r->body.value("errors", json::array());
      if (errors.empty()) ctx.err << *config << ": " << error_text(*r) << "\n";
      for (const auto& line : errors) {
        if (line.is_string()) ctx.err << *config << ": " << line.get<std::string>() << "\n";
      }
      return;
    }
    if (r->status != 201) {
      ctx.err << error_prefix(ctx.colour_err()) << error_text(*r) << "\n";
      ctx.exit_code = exit_failure;
      return;
    }
    if (o->json) {
      ctx.out << json{{"id", str(r->body, "id")}}.dump() << "\n";
    } else {
      ctx.out << str(r->body, "id") << "\n";
    }
    ctx.exit_code = exit_ok;
  });
}

void add_list_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand("list", "List the daemon's jobs, oldest first");
  cmd->add_flag("--json", o->json, "Print the API's JSON");
  add_socket_option(cmd, *o);
  cmd->callback([o, &ctx] {
    auto body = call(ctx, *o, "GET", "/v1/jobs");
    if (!body) {
      ctx.exit_code = exit_failure;
      return;
    }
    ctx.out << (o->json ? body->dump(2) + "\n" : format_job_list(*body, ctx.colour_out()));
    ctx.exit_code = exit_ok;
  });
}

void add_status_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto watch = std::make_shared<double>(0.0);
  auto* cmd = app.add_subcommand(
      "status", "Show a job: state, progress, checkpoint, memory and every worker it ran");
  cmd->add_option("ID", o->id, "Job id (from submit or list)")->required();
  cmd->add_flag("--json", o->json, "Print the API's JSON (the job record plus live progress)");
  cmd->add_option("-w,--watch", *watch,
                  "Show it again every this many seconds until the job ends (e.g. --watch 2)")
      ->check(CLI::PositiveNumber)
      ->expected(0, 1)
      ->default_str("2");
  add_socket_option(cmd, *o);
  cmd->callback([o, watch, cmd, &ctx] {
    if (!is_valid_job_id(o->id)) {
      ctx.err << error_prefix(ctx.colour_err()) << "invalid job id '" << o->id << "'\n";
      ctx.exit_code = exit_usage;
      return;
    }
    const bool watching = cmd->count("--watch") > 0;
    const double every = *watch > 0 ? *watch : 2.0;
    const bool terminal = os::stdout_is_terminal();
    while (true) {
      auto body = call(ctx, *o, "GET", "/v1/jobs/" + o->id);
      if (!body) {
        ctx.exit_code = exit_failure;
        return;
      }
      std::string view;
      if (o->json) {
        view = body->dump(2) + "\n";
      } else {
        view = format_job_status(*body, ctx.colour_out());
        // The curves are a second call; without them the status is still whole, and says so.
        auto h = control_client::call(resolve_client_socket(o->socket), "GET",
                                      "/v1/jobs/" + o->id + "/history");
        const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
        if (h && h->status == 200) {
          view += format_job_history(*body, h->body, now);
        } else {
          view += "  (no history: " + (h ? error_text(*h) : h.error().message) + ")\n";
        }
      }
      // A terminal's screen is redrawn in place; a pipe gets one view after another.
      if (watching && terminal) ctx.out << "\x1b[H\x1b[2J";
      ctx.out << view << std::flush;
      if (!watching || is_terminal_name(str(*body, "state"))) break;
      if (!terminal) ctx.out << "\n";
      std::this_thread::sleep_for(std::chrono::duration<double>(every));
    }
    ctx.exit_code = exit_ok;
  });
}

std::string last_lines(const std::string& text, std::size_t n) {
  if (n == 0) return {};
  std::size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // the final newline ends the last line
  std::size_t at = end;
  for (std::size_t found = 0; at > 0; --at) {
    if (text[at - 1] == '\n' && ++found == n) break;
  }
  return text.substr(at);
}

void add_logs_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto follow = std::make_shared<bool>(false);
  auto tail = std::make_shared<std::size_t>(0);
  auto stamps = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("logs", "Print a job's worker log (stderr and supervisor events)");
  cmd->add_option("ID", o->id, "Job id")->required();
  cmd->add_flag("-f,--follow", *follow, "Keep printing new output until the job ends");
  auto* tail_opt = cmd->add_option("-n,--tail", *tail, "Start with only the last N lines");
  cmd->add_flag("-t,--timestamps", *stamps, "Show the time each line was written (UTC)");
  add_socket_option(cmd, *o);
  cmd->callback([o, follow, tail, tail_opt, stamps, &ctx] {
    if (!is_valid_job_id(o->id)) {
      ctx.err << error_prefix(ctx.colour_err()) << "invalid job id '" << o->id << "'\n";
      ctx.exit_code = exit_usage;
      return;
    }
    const auto chunk_at = [&](std::uint64_t offset) {
      return call(ctx, *o, "GET", "/v1/jobs/" + o->id + "/logs?offset=" + std::to_string(offset));
    };
    const auto unsigned_field = [](const json& body, const char* key, std::uint64_t fallback) {
      const auto& f = member(body, key);
      return f.is_number_unsigned() ? f.get<std::uint64_t>() : fallback;
    };
    // Stamps are stripped here, not by the daemon: the API hands out the stored bytes, so an
    // offset always counts what was sent, whoever reads it (a dashboard shows the stamps).
    log_stamp_stripper stripper;
    const auto print = [&](std::string_view text) {
      if (*stamps) {
        ctx.out << text;
      } else {
        ctx.out << stripper.feed(text);
      }
      ctx.out << std::flush;
    };
    std::uint64_t offset = 0;
    if (tail_opt->count() > 0) {
      // Read back from the end in growing windows until the window holds N whole lines.
      auto first = chunk_at(0);
      if (!first) {
        ctx.exit_code = exit_failure;
        return;
      }
      const auto size = unsigned_field(*first, "size", 0);
      const auto start = unsigned_field(*first, "start", 0);  // older bytes were rotated away
      std::uint64_t window = max_log_chunk_bytes;
      std::string text;
      while (true) {
        const std::uint64_t from = size > window ? size - window : 0;
        text.clear();
        for (std::uint64_t at = from; at < size;) {
          auto body = chunk_at(at);
          if (!body) {
            ctx.exit_code = exit_failure;
            return;
          }
          text += str(*body, "data");
          const auto next = unsigned_field(*body, "next_offset", at);
          if (next <= at) break;
          at = next;
        }
        const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
        if (from <= start || lines > *tail || window >= (64ull << 20)) break;
        window *= 4;
      }
      print(last_lines(text, *tail));
      offset = size;
      if (!*follow) {
        ctx.exit_code = exit_ok;
        return;
      }
    }
    while (true) {
      auto body = chunk_at(offset);
      if (!body) {
        ctx.exit_code = exit_failure;
        return;
      }
      if (const auto lost = unsigned_field(*body, "skipped", 0); lost > 0) {
        ctx.err << error_prefix(ctx.colour_err()) << lost
                << " bytes of the log were rotated away before they were read\n";
      }
      print(str(*body, "data"));
      const auto next = unsigned_field(*body, "next_offset", offset);
      const auto size = unsigned_field(*body, "size", 0);
      const bool advanced = next > offset;
      offset = next;
      if (advanced && next < size) continue;  // more is there already
      // Caught up. The state was read after the chunk, on the daemon's one thread, so a
      // terminal state here means nothing more will be written.
      if (!*follow || is_terminal_name(str(*body, "state"))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    ctx.exit_code = exit_ok;
  });
}

namespace {

// A verb that POSTs to /v1/jobs/ID/<verb> with no body and prints one line from the answer.
void add_job_action_command(CLI::App& app, cli_context& ctx, const std::string& verb,
                            const std::string& description,
                            std::function<std::string(const std::string& state)> describe) {
  auto o = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(verb, description);
  cmd->add_option("ID", o->id, "Job id")->required();
  add_socket_option(cmd, *o);
  cmd->callback([o, &ctx, verb, describe = std::move(describe)] {
    if (!is_valid_job_id(o->id)) {
      ctx.err << error_prefix(ctx.colour_err()) << "invalid job id '" << o->id << "'\n";
      ctx.exit_code = exit_usage;
      return;
    }
    auto body = call(ctx, *o, "POST", "/v1/jobs/" + o->id + "/" + verb);
    if (!body) {
      ctx.exit_code = exit_failure;
      return;
    }
    ctx.out << "job " << o->id << ": " << describe(str(*body, "state")) << "\n";
    ctx.exit_code = exit_ok;
  });
}

}  // namespace

void add_cancel_command(CLI::App& app, cli_context& ctx) {
  add_job_action_command(
      app, ctx, "cancel", "Cancel a job: a queued job never starts, a running worker is stopped",
      [](const std::string& state) -> std::string {
        return state == "cancelled" ? "cancelled" : "cancelling (the worker is being stopped)";
      });
}

void add_resume_command(CLI::App& app, cli_context& ctx) {
  add_job_action_command(app, ctx, "resume",
                         "Run a paused job again (the daemon pauses a job when the disk is full)",
                         [](const std::string& state) { return state; });
}

void add_wait_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto timeout_s = std::make_shared<double>(0.0);
  auto* cmd = app.add_subcommand(
      "wait",
      "Wait until a job completes, fails or is cancelled; exit 0 only if it completed, 124 if "
      "--timeout ran out first");
  cmd->add_option("ID", o->id, "Job id")->required();
  cmd->add_option("--timeout", *timeout_s, "Give up after this many seconds (default: never)")
      ->check(CLI::NonNegativeNumber);
  add_socket_option(cmd, *o);
  cmd->callback([o, timeout_s, &ctx] {
    if (!is_valid_job_id(o->id)) {
      ctx.err << error_prefix(ctx.colour_err()) << "invalid job id '" << o->id << "'\n";
      ctx.exit_code = exit_usage;
      return;
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto where = resolve_client_choice(o->socket);
    const auto& socket = where.path;
    // A daemon restart (upgrade, crash) must not end the wait: after the first good answer,
    // transport errors are retried for this long.
    constexpr auto reconnect_window = std::chrono::seconds(60);
    std::optional<clock::time_point> unreachable_since;
    bool answered = false;
    while (true) {
      auto r = control_client::call(socket, "GET", "/v1/jobs/" + o->id);
      if (!r) {
        const auto now = clock::now();
        if (!unreachable_since) unreachable_since = now;
        if (!answered || now - *unreachable_since > reconnect_window) {
          ctx.err << error_prefix(ctx.colour_err()) << unreachable_message(where, r.error().message)
                  << "\n";
          ctx.exit_code = exit_failure;
          return;
        }
      } else if (r->status != 200) {
        ctx.err << error_prefix(ctx.colour_err()) << error_text(*r) << "\n";
        ctx.exit_code = exit_failure;
        return;
      } else {
        answered = true;
        unreachable_since.reset();
        const auto state = str(r->body, "state");
        if (is_terminal_name(state)) {
          const auto diagnosis = str(r->body, "diagnosis");
          ctx.out << "job " << o->id << ": " << state
                  << (diagnosis.empty() ? "" : " (" + diagnosis + ")") << "\n";
          ctx.exit_code = state == "completed" ? exit_ok : exit_failure;
          return;
        }
      }
      if (*timeout_s > 0 &&
          std::chrono::duration<double>(clock::now() - start).count() > *timeout_s) {
        ctx.err << error_prefix(ctx.colour_err()) << "job " << o->id << " did not finish within "
                << *timeout_s << " s\n";
        ctx.exit_code = exit_timeout;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
}

result<std::int64_t> parse_age(std::string_view text) {
  // "90s", "30m", "12h", "7d", "2w": what people type for an age; a bare number is refused
  // rather than guessed (seconds? days?).
  std::int64_t n = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || n < 0 || ptr + 1 != end) {
    return make_error("--older-than '" + std::string(text) +
                      "': expected a number and a unit: 90s, 30m, 12h, 7d or 2w");
  }
  std::int64_t unit_ms = 0;
  switch (*ptr) {
    case 's':
      unit_ms = 1000;
      break;
    case 'm':
      unit_ms = 60 * 1000;
      break;
    case 'h':
      unit_ms = 3600 * 1000;
      break;
    case 'd':
      unit_ms = 24 * 3600 * 1000;
      break;
    case 'w':
      unit_ms = 7 * 24 * 3600 * 1000;
      break;
    default:
      return make_error("--older-than '" + std::string(text) +
                        "': unknown unit; use s, m, h, d or w");
  }
  if (n > std::numeric_limits<std::int64_t>::max() / unit_ms) {
    return make_error("--older-than '" + std::string(text) + "': too large");
  }
  return n * unit_ms;
}

void add_rm_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto force = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "rm", "Delete a job and its folder (checkpoints, logs, history); refused while it runs");
  cmd->add_option("ID", o->id, "Job id")->required();
  cmd->add_flag("-f,--force", *force, "Cancel a running job first, then delete it");
  add_socket_option(cmd, *o);
  cmd->callback([o, force, &ctx] {
    if (!is_valid_job_id(o->id)) {
      ctx.err << error_prefix(ctx.colour_err()) << "invalid job id '" << o->id << "'\n";
      ctx.exit_code = exit_usage;
      return;
    }
    auto body = call(ctx, *o, "DELETE", "/v1/jobs/" + o->id + (*force ? "?force=true" : ""));
    if (!body) {
      ctx.exit_code = exit_failure;
      return;
    }
    const auto& removed = member(*body, "removed");
    ctx.out << "job " << o->id << ": "
            << (removed.is_boolean() && removed.get<bool>()
                    ? "removed"
                    : "cancelling; it is removed once its worker has stopped")
            << "\n";
    ctx.exit_code = exit_ok;
  });
}

void add_prune_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto older = std::make_shared<std::string>();
  auto states = std::make_shared<std::vector<std::string>>();
  auto dry_run = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "prune", "Delete finished jobs (completed, failed, cancelled) and their folders");
  cmd->add_option("--older-than", *older, "Only jobs not updated for this long: 90s, 30m, 12h, 7d");
  cmd->add_option("--state", *states,
                  "Only jobs in these states (comma-separated): completed,failed,cancelled")
      ->delimiter(',');
  cmd->add_flag("-n,--dry-run", *dry_run, "List what would go, delete nothing");
  cmd->add_flag("--json", o->json, "Print the API's JSON");
  add_socket_option(cmd, *o);
  cmd->callback([o, older, states, dry_run, &ctx] {
    json req = json::object();
    if (!older->empty()) {
      auto ms = parse_age(*older);
      if (!ms) {
        ctx.err << error_prefix(ctx.colour_err()) << ms.error().message << "\n";
        ctx.exit_code = exit_usage;
        return;
      }
      req["older_than_ms"] = *ms;
    }
    if (!states->empty()) req["states"] = *states;
    if (*dry_run) req["dry_run"] = true;
    auto body = call(ctx, *o, "POST", "/v1/prune", req);
    if (!body) {
      ctx.exit_code = exit_failure;
      return;
    }
    if (o->json) {
      ctx.out << body->dump(2) << "\n";
    } else {
      const auto& removed = member(*body, "removed");
      const std::size_t n = removed.is_array() ? removed.size() : 0;
      for (const auto& id : removed) {
        if (id.is_string())
          ctx.out << (*dry_run ? "would remove " : "removed ") << id.get<std::string>() << "\n";
      }
      if (n == 0) ctx.out << "nothing to prune\n";
    }
    bool clean = true;
    for (const auto& e : member(*body, "errors")) {
      clean = false;
      ctx.err << error_prefix(ctx.colour_err()) << "cannot remove " << str(e, "id") << ": "
              << str(e, "error") << "\n";
    }
    ctx.exit_code = clean ? exit_ok : exit_failure;
  });
}

void add_dashboard_command(CLI::App& app, cli_context& ctx) {
  auto o = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(
      "dashboard", "Print the URL of the daemon's web dashboard, with its token (open it locally)");
  add_socket_option(cmd, *o);
  cmd->callback([o, &ctx] {
    auto body = call(ctx, *o, "GET", "/v1/dashboard");
    if (!body) {
      ctx.exit_code = exit_failure;
      return;
    }
    ctx.out << str(*body, "url") << "\n";
    ctx.exit_code = exit_ok;
  });
}

}  // namespace baton::supervisor
