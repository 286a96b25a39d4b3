// A checkpoint is everything a worker needs to resume exactly: named tensors plus string
// metadata, stored as a safetensors file (8-byte little-endian header length, JSON header, raw
// little-endian tensor bytes) so any safetensors or numpy reader can load the weights. baton adds
// a format version and an xxh64 digest over the whole file in `__metadata__`, so every truncation,
// flipped bit or lying header is detected. Tensor names are documented in protocol/README.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace baton::protocol {

enum class dtype { f32, f64, i64, u64, u32, i32, u8 };
std::string_view to_string(dtype t);  // safetensors spelling: "F32", "I64", ...
std::size_t dtype_size(dtype t);

struct tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::string bytes;  // little-endian, C order; size == product(shape) * dtype_size(type)

  template <class T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

inline constexpr int checkpoint_format_version = 1;

// Keys of __metadata__ that every baton checkpoint has (values are strings, as safetensors wants).
namespace meta {
inline constexpr const char* format = "format";  // "baton-checkpoint"
inline constexpr const char* format_version = "format_version";
inline constexpr const char* digest = "digest";  // "xxh64:<16 hex digits>"
inline constexpr const char* job = "job";
inline constexpr const char* step = "step";    // global optimizer steps done
inline constexpr const char* epoch = "epoch";  // epochs fully done
}  // namespace meta

struct checkpoint {
  std::map<std::string, std::string> metadata;
  std::vector<tensor> tensors;  // written in this order

  const tensor* find(std::string_view name) const;
  std::int64_t step() const;  // metadata "step", 0 if absent (decode guarantees it is valid)
};

// A tensor whose bytes live elsewhere (a model's own buffers), so a checkpoint can be written
// without copying its tensors. The viewed memory must outlive every use of the view.
struct tensor_view {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::string_view bytes;  // as tensor::bytes
};

struct checkpoint_view {
  std::map<std::string, std::string> metadata;
  std::vector<tensor_view> tensors;  // written in this order

  const tensor_view* find(std::string_view name) const;
  std::int64_t step() const;  // as checkpoint::step()
};

// Views over an owned checkpoint's tensors; valid while `c` is alive and unchanged.
checkpoint_view view_of(const checkpoint& c);

// Receives a file's bytes in order, piece by piece; an error stops the write.
using byte_sink = std::function<status(std::string_view)>;

// The same bytes as encode_checkpoint, handed to `sink` as the header and then each tensor's
// bytes straight from its view, so no copy of the tensors is ever made. Validates everything and
// hashes the tensors (for the digest in the header) before the first call to `sink`.
status write_checkpoint(const checkpoint_view& c, const byte_sink& sink);

// The file's first bytes: the 8-byte length prefix and the JSON header, digest included.
// Validates everything and hashes the tensors in place (that is how the digest gets into the
// header, which comes before them); write_checkpoint is this followed by the tensors' bytes.
result<std::string> checkpoint_header(const checkpoint_view& c);

// Runs `a` and `b` at the same time on two threads where the caller has them (the worker's own
// team), else `a` and then `b`; returns once both have. Neither throws: callers catch inside.
// A save then hashes its tensors while it writes them, and a restore hashes each piece while it
// reads the next: on two cores the hash (a fifth of a save or restore) stops adding to either.
using side_by_side =
    std::function<void(const std::function<void()>& a, const std::function<void()>& b)>;

// Writes bytes a sink already took over again, at their offset in the file: the digest's digits
// once the tensors behind them are hashed (os::writable_file::write_at).
using byte_patch = std::function<status(std::uint64_t offset, std::string_view bytes)>;

// checkpoint_header with the digest's 16 digits left as zeros: everything validated, nothing
// hashed (the digest reads those digits as zeros anyway: protocol/README.md, "Digest").
result<std::string> unsealed_checkpoint_header(const checkpoint_view& c);

// c as a checkpoint file, its tensors read once: hands `sink` the header
// (unsealed_checkpoint_header(c)), then the tensors in pieces of at most `piece_bytes`, hashing every byte, and then hands `patch` the
// digits at their offset. Returns the digest ("xxh64:..."), so a writer can announce its file's
// digest without reading it back. A file whose patch failed keeps its zeros and never verifies. Without `both`, each piece is hashed
// just before `sink` takes it, so the digest is of the very bytes handed over. With `both`, the
// hash runs beside the writes on its second thread: the caller promises the viewed memory does
// not change until this returns (if it did, the file would fail its digest wherever it is read).
result<std::string> write_checkpoint_streamed(const checkpoint_view& c, std::string_view header,
                                              const byte_sink& sink, const byte_patch& patch,
                                              std::size_t piece_bytes = 256 << 10,
                                              const side_by_side* both = nullptr);

// Serialises to safetensors bytes, setting format, format_version and digest in the metadata.
// Fails on inconsistent tensors (size not matching shape, duplicate names).
result<std::string> encode_checkpoint(const checkpoint& c);

// Structural checks only, for safetensors files from any tool (initial weights): length prefix,
// header JSON, dtypes, shapes, offsets tiling the buffer. __metadata__ may be absent and no baton
// key or digest is required. Errors name `what` and the byte offset or tensor.
result<checkpoint> decode_safetensors(std::string_view bytes, std::string_view what);

// decode_safetensors plus baton's rules: format, version, digest, step. Parses and verifies
// everything: sizes, offsets, dtypes, shapes, digest, version, required metadata. `what` names the
// source (a file path) in error messages, with byte offsets.
result<checkpoint> decode_checkpoint(std::string_view bytes, std::string_view what);

// decode_checkpoint without copying the tensors: the views point into `bytes`, which must outlive
// them. For resuming, where the tensors are copied into the model anyway.
result<checkpoint_view> decode_checkpoint_view(std::string_view bytes, std::string_view what);

// The digest string stored in a file's metadata ("xxh64:..."), for protocol messages.
result<std::string> checkpoint_digest(std::string_view bytes);

// checkpoint_digest for a file read in pieces: `read(offset, n, out)` fills `out` with the n bytes
// at `offset` (fewer only at the end of the file). Verifies what decode_checkpoint verifies while
// holding only the header and one chunk of `chunk_bytes`, so a 50 MB checkpoint can be checked
// without loading it. `file_size` is the file's length; `what` names it in errors.
using range_reader = std::function<status(std::uint64_t offset, std::size_t n, std::string& out)>;
result<std::string> checkpoint_digest_streamed(const range_reader& read, std::uint64_t file_size,
                                               std::string_view what,
                                               std::size_t chunk_bytes = 1 << 20);

// The same check, also giving the step in the file's metadata (to match against its name).
struct checkpoint_summary {
  std::string digest;
  std::int64_t step = 0;
};
result<checkpoint_summary> checkpoint_summary_streamed(const range_reader& read,
                                                       std::uint64_t file_size,
                                                       std::string_view what,
                                                       std::size_t chunk_bytes = 1 << 20);

// Where one tensor's bytes lie in a checkpoint file.
struct tensor_extent {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // from the start of the file
  std::uint64_t size = 0;    // bytes: product(shape) * dtype_size(type)
};

// A checkpoint file that verified, described without its tensors' bytes: a resume reads those
// straight into their destinations (read_checkpoint_tensors) and never holds the file.
struct checkpoint_index {
  std::map<std::string, std::string> metadata;
  std::vector<tensor_extent> tensors;  // in file order; they tile the data after the header
  std::string head;                    // the file's bytes before the first tensor, as verified
  std::uint64_t file_size = 0;
  // Whether the index was made after hashing the data (digest_check::now). Without it only the
  // structure is known good, and read_checkpoint_tensors' hash is the file's first digest check.
  bool digest_checked = true;

  const tensor_extent* find(std::string_view name) const;
  std::int64_t step() const;  // as checkpoint::step()
};

// When the data's digest is checked. `now`: index_checkpoint_streamed hashes the whole file, so an
// index is of a file that verified. `on_read`: it checks the header, the layout and every rule but
// the digest, and read_checkpoint_tensors' own hash of the bytes it reads is the digest check (one
// read of the file instead of two, for a resume that reads every tensor anyway; on a mismatch the
// destinations hold the bad bytes and the caller must throw them away).
enum class digest_check { now, on_read };

// checkpoint_summary_streamed's check (the header and one chunk in memory at a time), keeping
// the parsed header.
result<checkpoint_index> index_checkpoint_streamed(const range_reader& read,
                                                   std::uint64_t file_size, std::string_view what,
                                                   std::size_t chunk_bytes = 1 << 20,
                                                   digest_check check = digest_check::now);

// Fills all of `out` with the file's bytes at `offset` (os::readable_file::read_into).
using range_reader_into = std::function<status(std::uint64_t offset, std::span<char> out)>;
// Where read_checkpoint_tensors puts a tensor: memory of exactly its size, or an empty span to
// skip it (its bytes are then read through a scratch piece, hashed and dropped).
using tensor_destination = std::function<std::span<char>(const tensor_extent&)>;

// The pass over a file index_checkpoint_streamed indexed: every tensor's bytes, in file order and
// in pieces of `chunk_bytes`, go straight into dest(tensor), each piece hashed while it is in
// cache; at the end the file's digest must come out, so a file damaged (digest_check::on_read), or
// changed or damaged since it was indexed (digest_check::now), is refused, naming `what`, with
// errc::corrupt_data. On any error the destinations hold partial data, for the caller to throw
// away. With `both`, each piece is hashed on its second thread while the next one is read (the
// bytes hashed are still the ones in the destinations); a file with a skipped tensor, whose
// pieces share one scratch buffer, is read one piece after the other as without it.
status read_checkpoint_tensors(const checkpoint_index& c, const range_reader_into& read,
                               const tensor_destination& dest, std::string_view what,
                               std::size_t chunk_bytes = 1 << 20,
                               const side_by_side* both = nullptr);

}  // namespace baton::protocol
