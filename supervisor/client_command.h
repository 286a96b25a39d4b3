// The client verbs of `baton` that talk to a running daemon over its control socket: submit,
// list, status, logs, cancel, resume and wait. Each is one or a few control_client calls; the
// socket (on Windows the control endpoint file) is found by resolve_client_choice. The human views
// (format_job_status, format_job_list) are pure functions of the API's JSON, kept apart from the
// calls so that a test needs no daemon.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "supervisor/cli.h"
#include "supervisor/socket_discovery.h"

namespace baton::supervisor {

void add_submit_command(CLI::App& app, cli_context& ctx);
void add_list_command(CLI::App& app, cli_context& ctx);
void add_status_command(CLI::App& app, cli_context& ctx);
void add_logs_command(CLI::App& app, cli_context& ctx);
void add_cancel_command(CLI::App& app, cli_context& ctx);
void add_resume_command(CLI::App& app, cli_context& ctx);
void add_wait_command(CLI::App& app, cli_context& ctx);
void add_rm_command(CLI::App& app, cli_context& ctx);
void add_prune_command(CLI::App& app, cli_context& ctx);
void add_dashboard_command(CLI::App& app, cli_context& ctx);

// "90s", "30m", "12h", "7d", "2w" in milliseconds (`baton prune --older-than`).
result<std::int64_t> parse_age(std::string_view text);

// Where the daemon is (socket_discovery.h): --socket if given, else $BATON_SOCKET, else this
// user's own daemon if it answers, else the system socket ($BATON_SYSTEM_SOCKET, else
// /run/baton/baton.sock). On Windows the machine-wide endpoint file stands for both.
socket_choice resolve_client_choice(const std::string& flag);
std::filesystem::path resolve_client_socket(const std::string& flag);

// `baton status ID`: state, progress, newest checkpoint, memory, and the shard history table.
// `colour`: state names in ANSI colour (terminal_style.h).
std::string format_job_status(const nlohmann::json& status, bool colour = false);
// `baton list`: one line per job.
std::string format_job_list(const nlohmann::json& list, bool colour = false);

// The values as `width` block characters (U+2581..U+2588), lowest to highest of all the values;
// each character is the largest value of its slice of the series (a peak is never averaged
// away). Fewer values than width: one character each. Empty for no values.
std::string sparkline(const std::vector<double>& values, std::size_t width);

// The last n lines of text (a final line without its newline counts); all of it if fewer.
std::string last_lines(const std::string& text, std::size_t n);

// What `baton status ID` adds from GET /v1/jobs/ID/history: elapsed time and ETA, one RSS
// sparkline per worker (the newest 6) and a loss sparkline. `now_ms` is Unix time.
std::string format_job_history(const nlohmann::json& status, const nlohmann::json& history,
                               std::int64_t now_ms);

}  // namespace baton::supervisor
