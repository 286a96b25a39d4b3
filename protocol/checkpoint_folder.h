// A folder checkpoint is a folder of any files a trainer wrote (torch.save, model.save, ...) that
// baton sealed: it hashed every file, wrote `baton-manifest.json` (relative path, size and xxh64
// of each file, the job and step, and a digest of the manifest itself) into the folder, synced
// everything and renamed the folder to `<checkpoint dir>/ckpt-<12-digit step>`. Verification
// re-hashes every file against the manifest, so a flipped byte, a truncated, missing or extra
// file, a link or a forged manifest is caught before anything resumes from it. The format is in
// protocol/README.md. The worker owns the staging folder until it announces it; from the seal on,
// the supervisor owns the sealed folder. All access goes through an env.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "os/env.h"

namespace baton::protocol {

inline constexpr const char* folder_manifest_name = "baton-manifest.json";
inline constexpr const char* folder_format = "baton-folder-checkpoint";
inline constexpr int folder_format_version = 1;
inline constexpr std::uint64_t max_manifest_bytes = 16ull << 20;
inline constexpr std::size_t max_folder_files = 100'000;
inline constexpr int max_folder_depth = 32;
// Files (a folder's, and a single-file checkpoint when checked) are hashed in chunks of this
// size: memory stays bounded whatever a file's size. Small enough to stay in a core's L2 between
// the read's copy and the hash, and to fault in fast: each check allocates its chunk afresh, and
// under a hypervisor (10 us a 4 KiB fault on one VM) a 4 MiB chunk's faults tripled the check of
// a 48 MiB checkpoint (29 ms against 10 ms).
inline constexpr std::size_t folder_hash_chunk_bytes = 256u << 10;
// The cap on a checkpoint the supervisor reads (a file, or a folder's files together) when the
// caller names none; the daemon's is its `max_checkpoint_mib` setting.
inline constexpr std::uint64_t default_max_checkpoint_bytes = 1ull << 30;

struct manifest_file {
  std::string path;  // relative, '/'-separated
  std::uint64_t size = 0;
  std::uint64_t xxh64 = 0;
};

struct folder_manifest {
  std::string job;
  std::int64_t step = 0;
  std::vector<manifest_file> files;  // sorted by path, bytewise
};

// The manifest's bytes, digest first and computed over the bytes with its hex digits zeroed.
// Sorts nothing: `m.files` must already be in order (seal sorts them).
std::string encode_manifest(const folder_manifest& m);
// Parses and checks a manifest's bytes: JSON without duplicate keys, format and version, the
// self-digest, every file entry (path rules, order, size, hash). `what` names the file in errors.
result<folder_manifest> decode_manifest(std::string_view bytes, std::string_view what);

// XXH64 (seed 0) of a file, read through `e` in chunks of folder_hash_chunk_bytes; `size` is the
// file's length when opened.
struct file_hash {
  std::uint64_t size = 0;
  std::uint64_t xxh64 = 0;
};
result<file_hash> hash_file(os::env& e, const std::filesystem::path& path);
// The same for a file a worker controls, opened with os::env::new_untrusted_readable_file: no
// links, no FIFOs or devices, at most limits.max_bytes, inside limits.within.
result<file_hash> hash_file(os::env& e, const std::filesystem::path& path,
                            const os::untrusted_file_limits& limits);

// Every regular file under `folder` (relative '/'-separated paths, sorted, with sizes), found
// without following links. Fails, naming the entry, on a symlink or special file anywhere, more
// than max_folder_files files or a depth beyond max_folder_depth.
result<std::vector<manifest_file>> list_folder_files(os::env& e,
                                                     const std::filesystem::path& folder);

// "ckpt-<12 digits>" for a step.
std::string folder_name_for_step(std::int64_t step);

struct sealed_folder {
  std::filesystem::path path;  // dest_dir / ckpt-<step>
  folder_manifest manifest;
};

// Seals a folder a worker wrote (see the header comment): refuses one that holds a link, a
// special file or its own baton-manifest.json, or whose files add up to more than `max_bytes`;
// hashes (each file opened as untrusted, inside the folder), writes the manifest, syncs every
// file and folder, replaces any `ckpt-<step>` already in `dest_dir`, renames, syncs `dest_dir`.
// On failure `staging_folder` is left where it was (the caller discards it) and nothing in
// `dest_dir` that verified is touched; a write that failed for space has errc::no_space.
result<sealed_folder> seal_checkpoint_folder(
    os::env& e, const std::filesystem::path& staging_folder, const std::filesystem::path& dest_dir,
    const std::string& job_id, std::int64_t step,
    std::uint64_t max_bytes = default_max_checkpoint_bytes);

// Verifies a sealed folder against its manifest; the error names the file and the reason.
// Reads every file once, a chunk at a time, each opened as untrusted inside the folder; a
// manifest whose files add up to more than `max_bytes` is refused before any of them is read.
result<folder_manifest> verify_checkpoint_folder(
    os::env& e, const std::filesystem::path& folder,
    std::uint64_t max_bytes = default_max_checkpoint_bytes);

}  // namespace baton::protocol
