// A checkpoint store is one job's folder of checkpoints, named by step: baton checkpoint files
// (ckpt-000000001234.safetensors), written atomically through an env, and sealed checkpoint
// folders (ckpt-000000001234/, see checkpoint_folder.h), both pruned together to the newest
// `keep`. Loading walks from the newest back and returns the first that verifies, with the
// reasons the newer ones were rejected, so a corrupt checkpoint never stops a job that has a good
// one. A pruned file is not removed but kept as the folder's one spare (`.spare`), which the next
// save writes over: a checkpoint rewritten every shard then reuses its disk blocks and cached
// pages instead of freeing and allocating them (on the seed job's 48 MiB, a fifth of a save's write
// and fsync time), at the cost of one more checkpoint's size on disk. Other names (.staging-*,
// temp files, rejected/, .spare) are not checkpoints and are ignored. The
// supervisor's reads treat every entry as the worker's and so as untrusted (no links, no special
// files, a size cap), and move what fails aside into rejected/ (with a .reason file beside it),
// so no later worker resumes from it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "os/env.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_folder.h"

namespace baton::protocol {

struct loaded_checkpoint {
  std::filesystem::path path;
  checkpoint data;
  std::vector<std::string> rejected;  // "<path>: <reason>" for each newer file that failed
};

// As loaded_checkpoint, with the tensors viewing the file's bytes instead of copies of them.
struct loaded_checkpoint_file {
  std::filesystem::path path;
  std::unique_ptr<const std::string> bytes;  // the whole file; heap, so moving keeps views valid
  checkpoint_view data;                      // views into *bytes
  std::vector<std::string> rejected;
};

// The newest checkpoint file that verified, still open, described by its header alone: a resume
// reads its tensors from `file` straight into the model (read_checkpoint_tensors), so the file
// is never held in memory.
struct opened_checkpoint {
  std::filesystem::path path;
  std::unique_ptr<os::readable_file> file;
  checkpoint_index index;
  std::vector<std::string> rejected;
};

// The newest checkpoint of either kind that verified, if any, and why newer ones did not.
struct verified_checkpoint {
  std::optional<std::filesystem::path> path;  // nullopt: none verified (or none at all)
  std::int64_t step = 0;
  bool is_folder = false;
  std::vector<std::string> rejected;  // "<path>: <reason>", newest first
};

// A checkpoint file save() wrote, with the digest of the bytes it wrote (the file's `digest`
// metadata value, which verify() would return), so the writer need not read it back.
struct saved_checkpoint {
  std::filesystem::path path;
  std::string digest;  // "xxh64:..."
};

// How the supervisor checks a folder before a spawn (newest_verified).
struct verify_options {
  std::uint64_t max_bytes = default_max_checkpoint_bytes;  // per file, and per folder in total
  bool move_rejected = false;  // move every rejected entry aside into rejected/
};

// A checkpoint file the supervisor read through and found good, with what stat_no_follow said of
// it just before and just after (the same identity both times, so the bytes read were the file's).
struct verified_file {
  std::filesystem::path path;
  std::int64_t step = 0;
  std::uint64_t size = 0;
  os::file_identity identity;
};

// Whether a walk of the folder may take `known` as its newest good checkpoint without reading it
// again: only when `names` (the folder's listing) holds no checkpoint, file or folder, newer than
// `known`'s own file (so the walk would start there), and `now` (stat_no_follow of that file,
// taken now) is a regular file with the size and identity it had when it was verified. Anything
// else (a newer entry, a stat error, a link, another inode or time, an env that gives no
// identity) means reading it again. Pure, for tests.
bool still_verified(const verified_file& known, const std::vector<std::string>& names,
                    const result<os::entry_info>& now);

// The folder, inside the checkpoint folder, that rejected checkpoints are moved into.
inline constexpr const char* rejected_dir_name = "rejected";

// One writer per folder: save() treats temp files of its own target as its own leftovers.
class checkpoint_store {
 public:
  // `keep` below 1 is taken as 1: the file just saved is never pruned.
  checkpoint_store(os::env& e, std::filesystem::path dir, int keep);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path_for_step(std::int64_t step) const;

  // Writes atomically, then removes the oldest beyond `keep`. On failure nothing that was
  // already saved is touched. Returns the path written and the digest of the bytes written
  // (hashed as they went out, see write_checkpoint_streamed). An error with code
  // errc::saved_but_cleanup_failed means the new checkpoint is durable and only pruning failed.
  result<saved_checkpoint> save(const checkpoint& c);
  // The same for a checkpoint whose tensors are views: their bytes go straight from the viewed
  // memory to the file, so saving needs no memory beyond the header.
  result<saved_checkpoint> save(const checkpoint_view& c);
  // Lets save() hash the tensors beside its writes, on `both`'s second thread (a writer whose
  // tensors hold still while it saves: the built-in worker with a team of two or more). Empty,
  // the default: each piece is hashed just before it is written.
  void set_side_by_side(side_by_side both) { both_ = std::move(both); }

  // Reads `path` back in bounded chunks and verifies it as decode_checkpoint would; returns its
  // digest string ("xxh64:..."). Memory use is the header plus one chunk, whatever the file size.
  result<std::string> verify(const std::filesystem::path& path) const;

  // Newest checkpoint file that verifies (folders are not baton checkpoint files and are
  // skipped); nullopt (not an error) when there is none at all. An error
  // when files exist but none verifies, listing each file's reason.
  result<std::optional<loaded_checkpoint>> load_newest() const;
  // The same holding the file once, with views of its tensors.
  result<std::optional<loaded_checkpoint_file>> load_newest_file() const;
  // The same verified with bounded memory (index_checkpoint_streamed: the header and one chunk
  // of `chunk_bytes`) and left open for reading the tensors: what a resume uses. With
  // digest_check::on_read the data is not hashed here: the caller's read_checkpoint_tensors is the
  // digest check, and on its errc::corrupt_data the caller opens again with that file in `skip`
  // (files named there are passed over, and not reported as rejected).
  result<std::optional<opened_checkpoint>> open_newest(
      std::size_t chunk_bytes = 1 << 20, digest_check check = digest_check::now,
      const std::vector<std::filesystem::path>& skip = {}) const;

  // Checkpoint paths (files and folders), oldest first by step.
  result<std::vector<std::filesystem::path>> list() const;

  // Walks back from the newest checkpoint, file or folder, verifying each with bounded memory
  // (files: the streamed check; folders: verify_checkpoint_folder), and stops at the first good
  // one. An error only when the folder cannot be listed.
  // Files are opened as untrusted (os::env::new_untrusted_readable_file, inside the folder) and
  // capped at options.max_bytes, folders likewise file by file and in total.
  result<verified_checkpoint> newest_verified(const verify_options& options = {}) const;
  // The same, answering `known` without reading it when still_verified says it may (a listing and
  // one stat); otherwise the full walk. `known` must have been verified with the same options.
  result<verified_checkpoint> newest_verified(const verify_options& options,
                                              const std::optional<verified_file>& known) const;

  // Moves `entry` (a file, folder or link directly inside the folder; a link is moved, never
  // followed) into rejected/ under its own name (a suffix when the name is taken), and writes
  // `reason` beside it as <name>.reason. Returns where it went.
  result<std::filesystem::path> move_aside(const std::filesystem::path& entry,
                                           const std::string& reason) const;

  // Removes the temp files (*.tmp-*) in the folder: a killed writer's leftovers. Only when no
  // writer runs (before a worker starts, after it ended). Returns how many it removed.
  result<int> sweep_temp_files() const;

  // Removes the oldest checkpoints (files and folders) beyond `keep`, never `keep_path`; the
  // first file of them becomes the spare when there is none.
  status prune(const std::filesystem::path& keep_path) const;
  // The spare a pruned file becomes, for the next save to write over.
  std::filesystem::path spare_path() const { return dir_ / ".spare"; }

 private:
  struct entry {
    std::int64_t step;
    std::filesystem::path path;
    bool is_folder;
  };
  result<std::vector<entry>> entries() const;

  os::env& env_;
  std::filesystem::path dir_;
  int keep_;
  side_by_side both_;
};

}  // namespace baton::protocol
