// What job_machine_test.cpp and job_machine_table_test.cpp share: the settings both tables are
// written against, and a readable form of an action so that expected action lists read as text.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include "supervisor/job_machine.h"

namespace baton::supervisor::testing {

inline constexpr std::uint64_t mib = 1024 * 1024;

inline machine_settings settings() {
  machine_settings m;
  m.memory.soft_limit_mib = 1000;
  m.memory.hard_limit_mib = 1500;
  m.restart.max_failures = 5;
  m.restart.backoff_initial_ms = 1000;
  m.restart.backoff_multiplier = 2.0;
  m.restart.backoff_max_ms = 8000;
  m.worker.stall_timeout_ms = 120000;
  m.worker.stop_grace_ms = 30000;
  return m;
}

inline std::string describe(const action& a) {
  std::ostringstream o;
  std::visit(
      [&](const auto& x) {
        using A = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<A, act::spawn_worker>) o << "spawn_worker";
        if constexpr (std::is_same_v<A, act::send_stop>) o << "send_stop";
        if constexpr (std::is_same_v<A, act::kill_group>) o << "kill_group";
        if constexpr (std::is_same_v<A, act::start_timer>)
          o << "start_timer{" << to_string(x.kind) << "," << x.ms << "}";
        if constexpr (std::is_same_v<A, act::cancel_timer>)
          o << "cancel_timer{" << to_string(x.kind) << "}";
        if constexpr (std::is_same_v<A, act::record_exit>)
          o << "record_exit{" << to_string(x.cause) << "," << x.status.describe() << "," << x.detail
            << "}";
        if constexpr (std::is_same_v<A, act::close_interrupted_shard>)
          o << "close_interrupted_shard{" << x.detail << "}";
        if constexpr (std::is_same_v<A, act::log_event>) o << "log_event{" << x.message << "}";
        if constexpr (std::is_same_v<A, act::request_slot>) o << "request_slot";
        if constexpr (std::is_same_v<A, act::persist>) o << "persist";
        if constexpr (std::is_same_v<A, act::start_ahead>) {
          o << "start_ahead";
          if (x.max_steps) o << "{" << *x.max_steps << "}";
        }
        if constexpr (std::is_same_v<A, act::drop_ahead>) o << "drop_ahead";
        if constexpr (std::is_same_v<A, act::read_unpaced>) o << "read_unpaced";
      },
      a);
  return o.str();
}

}  // namespace baton::supervisor::testing
