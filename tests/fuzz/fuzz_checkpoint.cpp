// Fuzzes protocol::decode_checkpoint, which reads checkpoint files a crashed or hostile worker may
// have written. Every input is decoded twice: as given, and with its first "xxh64:<16 hex>"
// string rewritten to the digest the bytes really have, since random mutations almost never get
// past the digest check otherwise and the layout checks behind it would go unexplored.
// Invariants: no throw or crash; rejections have a message; an accepted file has consistent
// tensors, checkpoint_digest agrees with it, and it re-encodes (encode accepts whatever decode
// accepts) to bytes that decode to the same tensors and metadata and re-encode identically.
#include <cstring>
#include <map>
#include <string>

#include "protocol/checkpoint.h"
#include "protocol/digest.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace baton::protocol;

constexpr std::string_view digest_key = "\"xxh64:";
constexpr std::size_t hex_len = 16;

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// The input with its first quoted xxh64 digest replaced by the true digest of the file, which is
// computed with that digest's own hex digits read as zeros (see protocol/README.md). Empty if the
// input holds no such string.
std::string with_true_digest(std::string_view bytes) {
  for (std::size_t at = bytes.find(digest_key); at != std::string_view::npos;
       at = bytes.find(digest_key, at + 1)) {
    const std::size_t hex = at + digest_key.size();
    if (hex + hex_len >= bytes.size() || bytes[hex + hex_len] != '"') continue;
    bool ok = true;
    for (std::size_t i = 0; i < hex_len; ++i) ok = ok && is_lower_hex(bytes[hex + i]);
    if (!ok) continue;
    std::string out(bytes);
    out.replace(hex, hex_len, std::string(hex_len, '0'));
    const std::string digest = baton::protocol::xxh64_digest(out);  // "xxh64:" + 16 hex
    out.replace(hex, hex_len, digest.substr(digest.size() - hex_len));
    return out;
  }
  return {};
}

bool same_tensors(const checkpoint& a, const checkpoint& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.type != y.type || x.shape != y.shape || x.bytes != y.bytes) {
      return false;
    }
  }
  return true;
}

// Metadata without the digest, which re-encoding recomputes.
std::map<std::string, std::string> content_metadata(const checkpoint& c) {
  auto m = c.metadata;
  m.erase(meta::digest);
  return m;
}

void check(std::string_view bytes) {
  auto c = decode_checkpoint(bytes, "fuzz.ckpt");
  if (!c) {
    const std::string message = c.error().message;
    BATON_FUZZ_CHECK(message.rfind("fuzz.ckpt: ", 0) == 0,
                     "error does not name the file: " + message);
    BATON_FUZZ_CHECK(baton::fuzz::is_valid_utf8(message), message);
    BATON_FUZZ_CHECK(!checkpoint_digest(bytes).has_value(),
                     "digest of a rejected file: " + message);
    return;
  }

  for (const auto& t : c->tensors) {
    std::size_t n = dtype_size(t.type);
    for (auto d : t.shape) {
      BATON_FUZZ_CHECK(d >= 0, "negative dimension in " + t.name);
      n *= static_cast<std::size_t>(d);
    }
    BATON_FUZZ_CHECK(n == t.bytes.size(), "tensor " + t.name + " size does not match its shape");
  }
  auto digest = checkpoint_digest(bytes);
  BATON_FUZZ_CHECK(digest.has_value(), "checkpoint_digest rejects a decodable file");
  BATON_FUZZ_CHECK(*digest == c->metadata.at(meta::digest), *digest);

  auto encoded = encode_checkpoint(*c);
  BATON_FUZZ_CHECK(encoded.has_value(),
                   "decoded checkpoint cannot be encoded: " + encoded.error().message);
  auto again = decode_checkpoint(*encoded, "re-encoded");
  BATON_FUZZ_CHECK(again.has_value(), "re-encoded checkpoint rejected: " + again.error().message);
  BATON_FUZZ_CHECK(same_tensors(*c, *again), "round trip changed the tensors");
  BATON_FUZZ_CHECK(content_metadata(*c) == content_metadata(*again),
                   "round trip changed the metadata");
  BATON_FUZZ_CHECK(again->step() == c->step(), "round trip changed the step");
  auto encoded_again = encode_checkpoint(*again);
  BATON_FUZZ_CHECK(encoded_again.has_value() && *encoded_again == *encoded,
                   "encoding is not deterministic");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = baton::fuzz::as_text(data, size);
  check(bytes);
  if (const std::string fixed = with_true_digest(bytes); !fixed.empty()) check(fixed);
  return 0;
}
