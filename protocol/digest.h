// Content digests used to detect corruption of files baton writes (checkpoints, state files).
// xxh64 from Debian's libxxhash: fast enough to hash a 50 MB checkpoint in a few milliseconds;
// not cryptographic (it guards against disks and crashes, not attackers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace baton::protocol {

std::uint64_t xxh64(std::string_view data, std::uint64_t seed = 0);

// How a digest is written in files and messages: "xxh64:" followed by 16 lowercase hex digits.
inline constexpr std::string_view xxh64_prefix = "xxh64:";
inline constexpr std::size_t digest_hex_len = 16;

// "xxh64:" and the digest of `data`.
std::string xxh64_digest(std::string_view data);

// The 16 lowercase hex digits of `v`, zero-padded.
std::string hex16(std::uint64_t v);

// The value of exactly 16 lowercase hex digits; nullopt for anything else.
std::optional<std::uint64_t> parse_hex16(std::string_view s);

// xxh64 over data given in pieces, so a large file can be hashed with a part replaced without
// copying it (the checkpoint digest hashes the file with its own digest field zeroed).
class xxh64_stream {
 public:
  explicit xxh64_stream(std::uint64_t seed = 0);
  ~xxh64_stream();
  xxh64_stream(const xxh64_stream&) = delete;
  xxh64_stream& operator=(const xxh64_stream&) = delete;
  void update(std::string_view data);
  std::uint64_t digest() const;

 private:
  struct state;
  state* state_;
};

}  // namespace baton::protocol
