// Fuzzes protocol::decode_checkpoint, which reads checkpoint files a crashed or hostile worker may
// have written. Every input is decoded twice: as given, and with its first "xxh64:<16 hex>"
// string rewritten to the digest the bytes really have, since random mutations almost never get
// past the digest check otherwise and the layout checks behind it would go unexplored.
// Invariants: no throw or crash; rejections have a message; an accepted file has consistent
// tensors, checkpoint_digest agrees with it, and it re-encodes (encode accepts whatever decode
// accepts) to bytes that decode to the same tensors and metadata and re-encode identically. The
// resume's path (index_checkpoint_streamed in small chunks, then read_checkpoint_tensors into
// buffers of their own) accepts exactly the files decode accepts, and reads the same tensors.
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

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

void check_streamed(std::string_view bytes, const baton::result<checkpoint>& c) {
  const range_reader read = [&](std::uint64_t offset, std::size_t n, std::string& out) {
    out = offset >= bytes.size() ? std::string() : std::string(bytes.substr(offset, n));
    return baton::status{};
  };
  auto idx = index_checkpoint_streamed(read, bytes.size(), "fuzz.ckpt", 7);
  BATON_FUZZ_CHECK(idx.has_value() == c.has_value(),
                   idx ? "the streamed index accepts a file decode rejects"
                       : "the streamed index rejects a decodable file: " + idx.error().message);
  if (!idx) return;
  BATON_FUZZ_CHECK(idx->metadata == c->metadata, "the index has other metadata");
  BATON_FUZZ_CHECK(idx->tensors.size() == c->tensors.size(), "the index has other tensors");
  std::vector<std::string> got(idx->tensors.size());
  const range_reader_into into = [&](std::uint64_t offset, std::span<char> out) {
    if (offset > bytes.size() || out.size() > bytes.size() - offset) {
      return baton::status(baton::make_error("past the end"));
    }
    std::memcpy(out.data(), bytes.data() + offset, out.size());
    return baton::status{};
  };
  const auto dest = [&](const tensor_extent& t) -> std::span<char> {
    auto& g = got[static_cast<std::size_t>(&t - idx->tensors.data())];
    g.assign(t.size, '\0');
    return {g.data(), g.size()};
  };
  const auto read_all = read_checkpoint_tensors(*idx, into, dest, "fuzz.ckpt", 5);
  BATON_FUZZ_CHECK(read_all.has_value(),
                   "the tensors of an indexed file do not read back: " + read_all.error().message);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto& t = c->tensors[i];
    BATON_FUZZ_CHECK(idx->tensors[i].name == t.name && got[i] == t.bytes,
                     "tensor " + t.name + " reads back otherwise than decoded");
  }
}

void check(std::string_view bytes) {
  auto c = decode_checkpoint(bytes, "fuzz.ckpt");
  check_streamed(bytes, c);
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
