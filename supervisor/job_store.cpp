#include "supervisor/job_store.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "protocol/digest.h"

namespace baton::supervisor {

namespace fs = std::filesystem;

namespace {

constexpr const char* jobs_folder = "jobs";
// Records are small; a huge file is corruption, not a record.
constexpr std::uint64_t max_slot_bytes = std::uint64_t{64} << 20;

// The slot wrapper: the digest covers the sequence number and the record's canonical dump, so
// any change that still parses as JSON is caught too (a flipped digit in seq would otherwise
// make an old slot look newest).
std::string slot_digest(std::int64_t seq, const nlohmann::json& record) {
  return protocol::xxh64_digest(std::to_string(seq) + ":" + record.dump());
}

std::string encode_slot(const job_record& r) {
  nlohmann::json record = to_json(r);
  const std::string digest = slot_digest(r.seq, record);
  nlohmann::json slot = {{"seq", r.seq}, {"digest", digest}, {"record", std::move(record)}};
  return slot.dump(1) + "\n";
}

result<job_record> decode_slot(std::string_view text, const fs::path& path) {
  const auto fail = [&](const std::string& why) -> result<job_record> {
    return make_error(path.string() + ": " + why);
  };
  // Records are small; a huge file is corruption, not a record.
  if (text.size() > (64u << 20)) return fail("larger than 64 MiB");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not valid JSON");
  if (!j.is_object()) return fail("expected a JSON object");
  const auto seq = j.find("seq");
  const auto digest = j.find("digest");
  const auto record = j.find("record");
  if (seq == j.end() || !seq->is_number_integer()) return fail("seq: expected an integer");
  if (digest == j.end() || !digest->is_string()) return fail("digest: expected a string");
  if (record == j.end() || !record->is_object()) return fail("record: expected an object");
  const std::string computed = slot_digest(seq->get<std::int64_t>(), *record);
  if (computed != digest->get<std::string>()) {
    return fail("digest mismatch (stored " + digest->get<std::string>() + ", computed " + computed +
                ")");
  }
  auto r = job_record_from_json(*record);
  if (!r) return fail(r.error().message);
  r->seq = seq->get<std::int64_t>();
  return r;
}

}  // namespace

status validate_job_id(const std::string& id) {
  if (id.empty() || id.size() > 80) return make_error("job id must have 1 to 80 characters");
  if (id.front() == '.') return make_error("job id \"" + id + "\" must not start with '.'");
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return make_error("job id \"" + id + "\" may hold only letters, digits, '.', '_' and '-'");
    }
  }
  return {};
}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

job_store::job_store(os::env& e, fs::path state_dir) : env_(e), state_dir_(std::move(state_dir)) {}

fs::path job_store::job_dir(const std::string& id) const { return state_dir_ / jobs_folder / id; }
fs::path job_store::spec_path(const std::string& id) const { return job_dir(id) / "spec.json"; }
fs::path job_store::checkpoint_dir(const std::string& id) const {
  return job_dir(id) / "checkpoints";
}
fs::path job_store::log_path(const std::string& id) const { return job_dir(id) / "worker.log"; }
fs::path job_store::slot_path(const std::string& id, int slot) const {
  return job_dir(id) / ("record." + std::to_string(slot) + ".json");
}

status job_store::open() { return env_.create_dirs(state_dir_ / jobs_folder); }

bool job_store::exists(const std::string& id) const {
  return validate_job_id(id) && env_.file_exists(spec_path(id));
}

result<job_record> job_store::create(const protocol::job_spec& spec, std::int64_t total_steps,
                                     std::optional<std::string> id, std::optional<job_owner> owner,
                                     bool hand_over_folder) {
  std::string chosen;
  if (id) {
    if (auto s = validate_job_id(*id); !s) return s.error();
    if (env_.file_exists(job_dir(*id))) {
      return make_error("job \"" + *id + "\" already exists in " + state_dir_.string());
    }
    chosen = *id;
  } else {
    // "<name>-<n>" with n one past the largest in use: ids are never reused, so logs and
    // status output never mix two jobs.
    // Every folder counts, finished or not: an id is never given to two folders.
    auto ids = folder_ids();
    if (!ids) return ids.error();
    std::int64_t next = 1;
    const std::string prefix = spec.name + "-";
    for (const auto& existing : *ids) {
      if (existing.rfind(prefix, 0) != 0) continue;
      std::int64_t n = 0;
      const auto* first = existing.data() + prefix.size();
      const auto* last = existing.data() + existing.size();
      auto [ptr, ec] = std::from_chars(first, last, n);
      if (ec == std::errc() && ptr == last) next = std::max(next, n + 1);
    }
    chosen = prefix + std::to_string(next);
  }
  if (auto s = env_.create_dirs(checkpoint_dir(chosen)); !s) return s.error();
  if (auto s =
          os::write_file_atomic(env_, spec_path(chosen), protocol::to_json(spec).dump(2) + "\n");
      !s) {
    return s.error();
  }
  job_record r;  // queued: the job machine's first state
  r.id = chosen;
  r.name = spec.name;
  r.created_ms = r.updated_ms = unix_ms_now();
  r.total_steps = total_steps;
  r.owner = std::move(owner);
  // The record last: a folder without one is an unfinished create (sweep_incomplete). save()
  // syncs the job's folder; jobs/ must also hold the new folder's entry before we answer.
  if (auto s = save(r); !s) return s.error();
  if (hand_over_folder && r.owner) {
    if (auto s = hand_over(chosen, *r.owner); !s) return s.error();
  }
  if (auto s = env_.sync_dir(state_dir_ / jobs_folder); !s) return s.error();
  return r;
}

status job_store::hand_over(const std::string& id, const job_owner& owner) {
  if (auto s = validate_job_id(id); !s) return s;
  // The inner folder first: until the job's folder is the user's, nothing in it can be swapped.
  if (auto s = env_.set_owner(checkpoint_dir(id), owner.uid, owner.gid, 0700); !s) return s;
  return env_.set_owner(job_dir(id), owner.uid, owner.gid, 0700);
}

result<std::vector<std::string>> job_store::folder_ids() const {
  const auto dir = state_dir_ / jobs_folder;
  if (!env_.file_exists(dir)) return std::vector<std::string>{};
  auto names = env_.list_dir(dir);
  if (!names) return names.error();
  std::vector<std::string> ids;
  for (auto& n : *names) {
    if (validate_job_id(n)) ids.push_back(std::move(n));
  }
  return ids;
}

result<std::vector<std::string>> job_store::sweep_incomplete() {
  auto ids = folder_ids();
  if (!ids) return ids.error();
  std::vector<std::string> removed;
  for (const auto& id : *ids) {
    if (env_.file_exists(slot_path(id, 0)) || env_.file_exists(slot_path(id, 1))) continue;
    if (auto s = env_.remove_dir_all(job_dir(id)); !s) {
      return make_error("cannot remove the unfinished job folder " + job_dir(id).string() + ": " +
                        s.error().message);
    }
    removed.push_back(id);
  }
  if (!removed.empty()) {
    if (auto s = env_.sync_dir(state_dir_ / jobs_folder); !s) return s.error();
  }
  return removed;
}

result<int> job_store::sweep_temp_files() {
  auto ids = folder_ids();
  if (!ids) return ids.error();
  int removed = 0;
  for (const auto& id : *ids) {
    auto n = os::remove_temp_files(env_, job_dir(id));
    if (!n) return with_context("sweeping " + job_dir(id).string(), n.error());
    removed += *n;
  }
  return removed;
}

status job_store::save(job_record& r) {
  if (auto s = validate_job_id(r.id); !s) return s;
  ++r.seq;
  r.updated_ms = unix_ms_now();
  const int slot = static_cast<int>(r.seq % 2);
  auto s = os::write_file_atomic(env_, slot_path(r.id, slot), encode_slot(r));
  if (!s) --r.seq;  // the slot on disk still holds the older generation
  return s;
}

result<loaded_record> job_store::load(const std::string& id) const {
  if (auto s = validate_job_id(id); !s) return s.error();
  std::optional<job_record> best;
  std::vector<std::string> reasons;
  int present = 0;
  for (int slot = 0; slot < 2; ++slot) {
    const auto path = slot_path(id, slot);
    if (!env_.file_exists(path)) continue;
    ++present;
    auto text = read_slot(path);
    if (!text) {
      reasons.push_back(text.error().message);
      continue;
    }
    auto r = decode_slot(*text, path);
    if (!r) {
      reasons.push_back(r.error().message);
      continue;
    }
    if (r->id != id) {
      reasons.push_back(path.string() + ": record is for job \"" + r->id + "\"");
      continue;
    }
    if (!best || r->seq > best->seq) best = std::move(*r);
  }
  if (!best) {
    if (present == 0) return make_error("job \"" + id + "\": no record in " + job_dir(id).string());
    std::string message = "job \"" + id + "\": no record verifies";
    for (const auto& why : reasons) message += "\n  " + why;
    return make_error(message);
  }
  // A slot that failed is reported even when it was the older one: it is damage worth knowing.
  return loaded_record{std::move(*best), std::move(reasons)};
}

result<std::string> job_store::read_slot(const fs::path& path) const {
  if (!record_owner_) return env_.read_file(path);
  // No link, no FIFO, and the daemon's own file: a slot the folder's user wrote is no record.
  auto file = env_.new_untrusted_readable_file(path, {max_slot_bytes, path.parent_path()});
  if (!file) return file.error();
  const auto owner = (*file)->owner_uid();
  if (owner && *owner != *record_owner_) {
    return make_error(path.string() + ": owned by uid " + std::to_string(*owner) +
                      ", not the daemon's uid " + std::to_string(*record_owner_) +
                      "; not a record the daemon wrote");
  }
  std::string text;
  if (auto s = (*file)->read(0, static_cast<std::size_t>((*file)->size()), text); !s) {
    return s.error();
  }
  return text;
}

result<protocol::job_spec> job_store::load_spec(const std::string& id) const {
  if (auto s = validate_job_id(id); !s) return s.error();
  return protocol::load_job_spec(env_, spec_path(id));
}

result<std::vector<std::string>> job_store::list() const {
  const auto dir = state_dir_ / jobs_folder;
  if (!env_.file_exists(dir)) return std::vector<std::string>{};
  auto names = env_.list_dir(dir);
  if (!names) return names.error();
  std::vector<std::string> ids;
  for (auto& n : *names) {
    if (validate_job_id(n) && env_.file_exists(spec_path(n))) ids.push_back(std::move(n));
  }
  return ids;
}

status job_store::remove(const std::string& id) {
  if (auto s = validate_job_id(id); !s) return s;
  return env_.remove_dir_all(job_dir(id));
}

}  // namespace baton::supervisor
