// What the crash-point helper (crash_save_main.cpp) writes and what crash_points_test.cpp expects
// back, defined once so both sides agree on the "new" state byte for byte. The test owns the old
// state on disk; the helper only ever performs the one save described here.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/checkpoint.h"
#include "supervisor/job_record.h"

namespace baton::crash {

// A small checkpoint whose bytes depend on `step`, so old and new files always differ.
inline protocol::checkpoint checkpoint_at(std::int64_t step) {
  protocol::checkpoint c;
  c.metadata = {{"step", std::to_string(step)}, {"job", "crash"}};
  protocol::tensor t;
  t.name = "w";
  t.type = protocol::dtype::f32;
  t.shape = {64};
  float v[64];
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(step) + 0.25f * static_cast<float>(i);
  t.bytes.assign(reinterpret_cast<const char*>(v), sizeof v);
  c.tensors.push_back(std::move(t));
  return c;
}

// The change the helper makes to a loaded record before saving it: every field that a real
// shard end touches, so a torn write could not pass for either generation.
inline void advance_record(supervisor::job_record& r) {
  r.state = supervisor::job_state::backoff;
  r.diagnosis = "crash-point generation " + std::to_string(r.seq + 1);
  r.checkpoint_step += 100;
  r.checkpoint_path = "ckpt-" + std::to_string(r.checkpoint_step);
  r.consecutive_failures += 1;
  r.exits_by_cause["crashed"] += 1;
  r.metrics["loss"] = 0.125;
  supervisor::shard_record s;
  s.index = static_cast<std::int64_t>(r.shards.size());
  s.pid = 4242;
  s.start_step = r.checkpoint_step - 100;
  s.end_step = r.checkpoint_step;
  s.cause = supervisor::exit_cause::crashed;
  s.detail = "signal 9";
  r.shards.push_back(s);
}

// A record as one comparable string: its JSON plus the store's generation number.
inline std::string fingerprint(const supervisor::job_record& r) {
  return std::to_string(r.seq) + " " + supervisor::to_json(r).dump();
}

}  // namespace baton::crash
