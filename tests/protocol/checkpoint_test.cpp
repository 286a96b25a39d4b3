#include "protocol/checkpoint.h"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <thread>

#include "protocol/digest.h"

using namespace baton::protocol;

static_assert(std::endian::native == std::endian::little, "tests build tensors in host order");

namespace {

template <class T>
tensor make_tensor(std::string name, dtype type, std::vector<std::int64_t> shape,
                   const std::vector<T>& values) {
  tensor t;
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  t.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return t;
}

float f32_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
double f64_bits(std::uint64_t b) { return std::bit_cast<double>(b); }

checkpoint sample() {
  checkpoint c;
  c.metadata = {{"job", "demo"}, {"step", "1234"}, {"epoch", "3"}, {"note", "ünïcode \"quoted\""}};
  c.tensors.push_back(make_tensor<float>(
      "layers.0.kernel", dtype::f32, {2, 3},
      {1.5f, -0.0f, std::numeric_limits<float>::infinity(), f32_bits(0x7fc00123),  // NaN payload
       std::numeric_limits<float>::denorm_min(), -3.25f}));
  c.tensors.push_back(make_tensor<double>("layers.0.bias", dtype::f64, {3},
                                          {f64_bits(0xfff8000000000abcull), 1e-310, -2.0}));
  c.tensors.push_back(make_tensor<std::int64_t>(
      "data.order", dtype::i64, {4},
      {std::numeric_limits<std::int64_t>::min(), -1, 0, std::numeric_limits<std::int64_t>::max()}));
  c.tensors.push_back(
      make_tensor<std::uint64_t>("rng.state", dtype::u64, {2}, {0xdeadbeefcafef00dull, ~0ull}));
  c.tensors.push_back(make_tensor<double>("scalar.f64", dtype::f64, {}, {3.141592653589793}));
  c.tensors.push_back(make_tensor<std::int64_t>("scalar.i64", dtype::i64, {}, {-42}));
  c.tensors.push_back(make_tensor<float>("empty", dtype::f32, {0, 5}, {}));
  c.tensors.push_back(make_tensor<std::int32_t>("i32", dtype::i32, {2}, {-7, 7}));
  c.tensors.push_back(make_tensor<std::uint32_t>("u32", dtype::u32, {1}, {4000000000u}));
  c.tensors.push_back(make_tensor<std::uint8_t>("u8", dtype::u8, {3}, {0, 128, 255}));
  return c;
}

checkpoint small() {
  checkpoint c;
  c.metadata = {{"step", "7"}};
  c.tensors.push_back(make_tensor<float>("w", dtype::f32, {2}, {1.0f, 2.0f}));
  c.tensors.push_back(make_tensor<std::int64_t>("s", dtype::i64, {}, {9}));
  return c;
}

std::string le64(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

// Builds a file by hand with a correct digest, so each test reaches the check it is aimed at.
// `tensors` is the header JSON after __metadata__ (starting with a comma, or empty).
std::string craft(const std::string& metadata_fields, const std::string& tensors,
                  const std::string& data) {
  std::string header = R"({"__metadata__":{"digest":"xxh64:0000000000000000")" + metadata_fields +
                       "}" + tensors + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file = le64(header.size()) + header + data;
  const auto pos = file.find("0000000000000000");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(baton::protocol::xxh64(file)));
  file.replace(pos, 16, hex);
  return file;
}

const std::string good_meta = R"(,"format":"baton-checkpoint","format_version":"1","step":"3")";

std::string decode_error(const std::string& bytes) {
  auto r = decode_checkpoint(bytes, "/x/ckpt.safetensors");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.rfind("/x/ckpt.safetensors: ", 0) == 0);  // names the file
  return r.error().message;
}

}  // namespace

TEST_CASE("checkpoint round trip is bit-exact", "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto bytes = encode_checkpoint(c);
  REQUIRE(bytes);
  auto d = decode_checkpoint(*bytes, "mem");
  REQUIRE(d);
  REQUIRE(d->tensors.size() == c.tensors.size());
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    INFO(c.tensors[i].name);
    CHECK(d->tensors[i].name == c.tensors[i].name);
    CHECK(d->tensors[i].type == c.tensors[i].type);
    CHECK(d->tensors[i].shape == c.tensors[i].shape);
    CHECK(d->tensors[i].bytes == c.tensors[i].bytes);
  }
  for (const auto& [k, v] : c.metadata) CHECK(d->metadata.at(k) == v);
  CHECK(d->metadata.at("format") == "baton-checkpoint");
  CHECK(d->metadata.at("format_version") == "1");
  CHECK(d->step() == 1234);
  REQUIRE(d->find("rng.state") != nullptr);
  CHECK(d->find("rng.state")->data_as<std::uint64_t>()[1] == ~0ull);
  CHECK(d->find("missing") == nullptr);
  // Encoding is deterministic, so a re-encode of the decoded checkpoint is the same file.
  auto again = encode_checkpoint(*d);
  REQUIRE(again);
  CHECK(*again == *bytes);
}

TEST_CASE("checkpoint digest is xxh64 over the file with its own digits zeroed",
          "[unit][checkpoint]") {
  auto bytes = encode_checkpoint(small());
  REQUIRE(bytes);
  auto dig = checkpoint_digest(*bytes);
  REQUIRE(dig);
  REQUIRE(dig->size() == 22);
  CHECK(dig->rfind("xxh64:", 0) == 0);
  std::string zeroed = *bytes;
  const auto pos = zeroed.find(*dig);
  REQUIRE(pos != std::string::npos);
  zeroed.replace(pos + 6, 16, std::string(16, '0'));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(baton::protocol::xxh64(zeroed)));
  CHECK(dig->substr(6) == hex);
  auto d = decode_checkpoint(*bytes, "mem");
  REQUIRE(d);
  CHECK(d->metadata.at("digest") == *dig);
  std::string bad = *bytes;
  bad.back() ^= 1;
  CHECK_FALSE(checkpoint_digest(bad));
}

TEST_CASE("encoded checkpoint is plain safetensors", "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto bytes = encode_checkpoint(c);
  REQUIRE(bytes);
  // An independent reader, following the safetensors spec only.
  REQUIRE(bytes->size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*bytes)[i]);
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= bytes->size());
  CHECK((*bytes)[8] == '{');
  const auto header = nlohmann::json::parse(bytes->substr(8, n));
  const std::string data = bytes->substr(8 + n);
  REQUIRE(header.contains("__metadata__"));
  for (const auto& [k, v] : header["__metadata__"].items()) CHECK(v.is_string());
  CHECK(header.size() == c.tensors.size() + 1);
  std::uint64_t expect_begin = 0;
  for (const auto& t : c.tensors) {
    INFO(t.name);
    REQUIRE(header.contains(t.name));
    const auto& h = header[t.name];
    CHECK(h["dtype"] == std::string(to_string(t.type)));
    CHECK(h["shape"].get<std::vector<std::int64_t>>() == t.shape);
    const auto b = h["data_offsets"][0].get<std::uint64_t>();
    const auto e = h["data_offsets"][1].get<std::uint64_t>();
    CHECK(b == expect_begin);  // contiguous, in the order given
    CHECK(data.substr(b, e - b) == t.bytes);
    expect_begin = e;
  }
  CHECK(expect_begin == data.size());  // the tensors cover the buffer exactly
}

TEST_CASE("checkpoint truncated at every byte offset is rejected", "[unit][checkpoint]") {
  auto bytes = encode_checkpoint(small());
  REQUIRE(bytes);
  for (std::size_t len = 0; len < bytes->size(); ++len) {
    INFO("length " << len);
    auto r = decode_checkpoint(std::string_view(*bytes).substr(0, len), "t.safetensors");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.rfind("t.safetensors: ", 0) == 0);
  }
  CHECK(decode_checkpoint(*bytes, "t.safetensors"));
}

TEST_CASE("checkpoint with any single flipped bit is rejected", "[unit][checkpoint]") {
  auto bytes = encode_checkpoint(sample());
  REQUIRE(bytes);
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<std::size_t> pos(0, bytes->size() - 1);
  std::uniform_int_distribution<int> bit(0, 7);
  for (int i = 0; i < 1000; ++i) {
    std::string copy = *bytes;
    const auto p = pos(rng);
    const int b = bit(rng);
    copy[p] = static_cast<char>(copy[p] ^ (1 << b));
    INFO("byte " << p << " bit " << b);
    REQUIRE_FALSE(decode_checkpoint(copy, "f"));
  }
}

TEST_CASE("checkpoint lying headers are rejected with a clear message", "[unit][checkpoint]") {
  const std::string f32x2 = R"(,"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\x01');
  // The crafted baseline itself is valid, so each case below fails for its own reason only.
  REQUIRE(decode_checkpoint(craft(good_meta, f32x2, eight), "x"));

  SECTION("shorter than the length prefix") {
    CHECK_THAT(decode_error("abc"), Catch::Contains("3 bytes, shorter than the 8-byte"));
  }
  SECTION("header length past the end") {
    CHECK_THAT(decode_error(le64(100) + "{}"),
               Catch::Contains("header length 100 at byte 0 runs past"));
  }
  SECTION("header length over the cap") {
    CHECK_THAT(decode_error(le64(1ull << 40) + "{}"), Catch::Contains("exceeds the limit"));
    CHECK_THAT(decode_error(le64(~0ull) + "{}"), Catch::Contains("exceeds the limit"));
  }
  SECTION("header not JSON") {
    CHECK_THAT(decode_error(le64(8) + "{\"a\":1,x"), Catch::Contains("invalid JSON at byte"));
  }
  SECTION("header not an object") {
    CHECK_THAT(decode_error(le64(8) + "[1,2,3] "),
               Catch::Contains("is a JSON array, expected an object"));
  }
  SECTION("header nested too deep") {
    std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
    CHECK_THAT(decode_error(le64(deep.size()) + deep), Catch::Contains("nesting deeper than"));
  }
  SECTION("duplicate key") {
    CHECK_THAT(decode_error(craft(good_meta, f32x2 + f32x2, eight)),
               Catch::Contains("duplicate key \"w\""));
  }
  SECTION("unknown dtype") {
    CHECK_THAT(decode_error(craft(
                   good_meta, R"(,"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]})", eight)),
               Catch::Contains("tensor \"w\": unknown dtype \"F16\""));
  }
  SECTION("negative dimension") {
    CHECK_THAT(decode_error(craft(
                   good_meta, R"(,"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", eight)),
               Catch::Contains("tensor \"w\": shape dimension -2 is negative"));
  }
  SECTION("shape product overflows") {
    CHECK_THAT(
        decode_error(craft(
            good_meta,
            R"(,"w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]})",
            eight)),
        Catch::Contains("tensor \"w\": shape [4611686018427387904,4611686018427387904] overflows"));
  }
  SECTION("end before begin") {
    CHECK_THAT(decode_error(craft(
                   good_meta, R"(,"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]})", eight)),
               Catch::Contains("tensor \"w\": data_offsets [8, 0] end before they begin"));
  }
  SECTION("size does not match shape") {
    CHECK_THAT(decode_error(craft(
                   good_meta, R"(,"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]})", eight)),
               Catch::Contains(
                   "tensor \"w\": shape [2] of F64 needs 16 bytes but data_offsets [0, 8] hold 8"));
  }
  SECTION("overlapping tensors") {
    CHECK_THAT(
        decode_error(craft(
            good_meta,
            R"(,"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})",
            eight)),
        Catch::Contains("tensor \"b\" starts at data byte 4") && Catch::Contains(("(overlap)")));
  }
  SECTION("gap between tensors") {
    CHECK_THAT(
        decode_error(craft(
            good_meta,
            R"(,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]})",
            eight)),
        Catch::Contains("tensor \"b\" starts at data byte 6") && Catch::Contains(("(gap)")));
  }
  SECTION("tensor past the end of the buffer") {
    CHECK_THAT(
        decode_error(
            craft(good_meta, R"(,"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", eight)),
        Catch::Contains(
            "tensor \"w\" data_offsets end 16 is past the end of the data buffer (8 bytes)"));
  }
  SECTION("trailing bytes") {
    CHECK_THAT(decode_error(craft(good_meta, f32x2, eight + "xyz")),
               Catch::Contains("3 trailing bytes after the last tensor"));
  }
  SECTION("unknown tensor field") {
    CHECK_THAT(
        decode_error(craft(
            good_meta, R"(,"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})", eight)),
        Catch::Contains("tensor \"w\": unknown field \"x\""));
  }
  SECTION("missing format") {
    CHECK_THAT(decode_error(craft(R"(,"format_version":"1","step":"3")", f32x2, eight)),
               Catch::Contains("no \"format\""));
  }
  SECTION("foreign format") {
    CHECK_THAT(
        decode_error(craft(R"(,"format":"pt","format_version":"1","step":"3")", f32x2, eight)),
        Catch::Contains("metadata format \"pt\" is not \"baton-checkpoint\""));
  }
  SECTION("missing format version") {
    CHECK_THAT(decode_error(craft(R"(,"format":"baton-checkpoint","step":"3")", f32x2, eight)),
               Catch::Contains("no \"format_version\""));
  }
  SECTION("unknown format version") {
    CHECK(decode_error(craft(R"(,"format":"baton-checkpoint","format_version":"7","step":"3")",
                             f32x2, eight)) ==
          "/x/ckpt.safetensors: unsupported checkpoint format version 7 (this build reads 1)");
  }
  SECTION("missing step") {
    CHECK_THAT(
        decode_error(craft(R"(,"format":"baton-checkpoint","format_version":"1")", f32x2, eight)),
        Catch::Contains("no \"step\""));
  }
  SECTION("invalid step") {
    for (const char* s : {"-1", "abc", "", "01", "99999999999999999999", " 3"}) {
      INFO(s);
      CHECK_THAT(decode_error(craft(
                     std::string(R"(,"format":"baton-checkpoint","format_version":"1","step":")") +
                         s + "\"",
                     f32x2, eight)),
                 Catch::Contains("is not a non-negative integer"));
    }
  }
  SECTION("metadata value not a string") {
    CHECK_THAT(decode_error(craft(good_meta + R"(,"n":3)", f32x2, eight)),
               Catch::Contains("__metadata__ value \"n\" is not a string"));
  }
  SECTION("digest mismatch") {
    std::string f = craft(good_meta, f32x2, eight);
    f.back() = '\x02';
    CHECK_THAT(decode_error(f), Catch::Contains("digest mismatch"));
  }
  SECTION("digest missing or malformed") {
    const std::string body =
        R"({"__metadata__":{"format":"baton-checkpoint","format_version":"1","step":"3"}})";
    CHECK_THAT(decode_error(le64(body.size()) + body), Catch::Contains("no \"digest\""));
    const std::string bad =
        R"({"__metadata__":{"digest":"md5:1","format":"baton-checkpoint","format_version":"1","step":"3"}})";
    CHECK_THAT(decode_error(le64(bad.size()) + bad), Catch::Contains("is not \"xxh64:\""));
  }
}

TEST_CASE("encode_checkpoint rejects inconsistent tensors", "[unit][checkpoint]") {
  checkpoint c = small();
  SECTION("size not matching shape") {
    c.tensors[0].shape = {3};
    auto r = encode_checkpoint(c);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message,
               Catch::Contains("\"w\": shape needs 12 bytes of F32 but it holds 8"));
  }
  SECTION("negative dimension") {
    c.tensors[0].shape = {-2};
    REQUIRE_FALSE(encode_checkpoint(c));
  }
  SECTION("duplicate names") {
    c.tensors.push_back(c.tensors[0]);
    auto r = encode_checkpoint(c);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("duplicate tensor \"w\""));
  }
  SECTION("reserved name") {
    c.tensors[0].name = "__metadata__";
    REQUIRE_FALSE(encode_checkpoint(c));
  }
  SECTION("missing or invalid step") {
    c.metadata.erase("step");
    REQUIRE_FALSE(encode_checkpoint(c));
    c.metadata["step"] = "-3";
    REQUIRE_FALSE(encode_checkpoint(c));
  }
  SECTION("invalid UTF-8 in metadata") {
    c.metadata["job"] = "\xff\xfe";
    auto r = encode_checkpoint(c);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("UTF-8"));
  }
  SECTION("caller's digest and format are replaced, not trusted") {
    c.metadata["digest"] = "xxh64:ffffffffffffffff";
    c.metadata["format_version"] = "9";
    auto r = encode_checkpoint(c);
    REQUIRE(r);
    auto d = decode_checkpoint(*r, "m");
    REQUIRE(d);
    CHECK(d->metadata.at("format_version") == "1");
  }
}

TEST_CASE("dtype names and sizes follow safetensors", "[unit][checkpoint]") {
  CHECK(to_string(dtype::f32) == "F32");
  CHECK(to_string(dtype::i64) == "I64");
  CHECK(to_string(dtype::u8) == "U8");
  CHECK(dtype_size(dtype::f64) == 8);
  CHECK(dtype_size(dtype::u32) == 4);
  CHECK(dtype_size(dtype::u8) == 1);
}

// Found by fuzz_checkpoint (regressions/fuzz_checkpoint/crash-b38f2529...): a header starting
// with a non-ASCII byte put that raw byte into the error text, which must stay valid UTF-8.
TEST_CASE("header syntax errors quote undecodable bytes as hex escapes", "[unit][checkpoint]") {
  const std::string e = decode_error(le64(2) + std::string("\xf7\0", 2));
  CHECK_THAT(e, Catch::EndsWith("invalid literal; last read: '\\xf7'"));
  CHECK_NOTHROW(nlohmann::json(e).dump());
}

// Found with fuzz_checkpoint's round-trip invariant (regressions/fuzz_checkpoint/
// empty-tensor-name.ckpt): decode accepted a tensor named "" that encode_checkpoint refuses, so a
// loaded checkpoint could not be written back.
TEST_CASE("a tensor with an empty name is rejected on decode too", "[unit][checkpoint]") {
  const std::string file =
      craft(good_meta, R"(,"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})", "\x07");
  CHECK(decode_error(file) == "/x/ckpt.safetensors: tensor with an empty name");
  checkpoint c;
  c.metadata = {{"step", "1"}};
  c.tensors.push_back(make_tensor<std::uint8_t>("", dtype::u8, {1}, {7}));
  CHECK_FALSE(encode_checkpoint(c));
}

TEST_CASE("write_checkpoint streams the same bytes as encode_checkpoint", "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto whole = encode_checkpoint(c);
  REQUIRE(whole);
  std::vector<std::string> pieces;
  REQUIRE(write_checkpoint(view_of(c), [&](std::string_view p) -> baton::status {
    pieces.emplace_back(p);
    return {};
  }));
  std::string joined;
  for (const auto& p : pieces) joined += p;
  CHECK(joined == *whole);
  // Header first, then one piece per non-empty tensor, each viewed rather than copied together.
  std::size_t non_empty = 0;
  for (const auto& t : c.tensors) non_empty += t.bytes.empty() ? 0 : 1;
  CHECK(pieces.size() == 1 + non_empty);
  CHECK(pieces[1] == c.tensors[0].bytes);
  auto d = decode_checkpoint(joined, "streamed");
  REQUIRE(d);
}

TEST_CASE("write_checkpoint stops at the first failing piece", "[unit][checkpoint]") {
  int calls = 0;
  auto s = write_checkpoint(view_of(sample()), [&](std::string_view) -> baton::status {
    if (++calls == 2) return baton::make_error("disk full");
    return {};
  });
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "disk full");
  CHECK(calls == 2);
}

TEST_CASE("write_checkpoint validates before writing anything", "[unit][checkpoint]") {
  checkpoint c = small();
  c.tensors[0].bytes.pop_back();
  int calls = 0;
  auto s = write_checkpoint(view_of(c), [&](std::string_view) -> baton::status {
    ++calls;
    return {};
  });
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("\"w\""));
  CHECK(calls == 0);
}

namespace {
range_reader reader_of(const std::string& bytes, int* reads = nullptr) {
  return [&bytes, reads](std::uint64_t offset, std::size_t n, std::string& out) -> baton::status {
    if (reads) ++*reads;
    out = offset >= bytes.size() ? std::string() : bytes.substr(offset, n);
    return {};
  };
}
}  // namespace

TEST_CASE("streamed digest check agrees with the in-memory one", "[unit][checkpoint]") {
  auto bytes = encode_checkpoint(sample());
  REQUIRE(bytes);
  auto expected = checkpoint_digest(*bytes);
  REQUIRE(expected);
  for (std::size_t chunk :
       {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{1} << 20}) {
    int reads = 0;
    auto got = checkpoint_digest_streamed(reader_of(*bytes, &reads), bytes->size(), "f", chunk);
    REQUIRE(got);
    CHECK(*got == *expected);
    CHECK(reads >= 2);
  }
}

TEST_CASE("streamed digest check rejects every truncation and flipped bit", "[unit][checkpoint]") {
  auto enc = encode_checkpoint(small());
  REQUIRE(enc);
  const std::string bytes = *enc;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    auto r = checkpoint_digest_streamed(reader_of(cut), cut.size(), "cut", 5);
    CHECK_FALSE(r);
  }
  for (std::size_t i = 0; i < bytes.size() * 8; ++i) {
    std::string bad = bytes;
    bad[i / 8] = static_cast<char>(bad[i / 8] ^ (1 << (i % 8)));
    auto r = checkpoint_digest_streamed(reader_of(bad), bad.size(), "flip", 5);
    INFO("bit " << i);
    CHECK_FALSE(r);
  }
}

TEST_CASE("streamed digest check reports read errors and short files", "[unit][checkpoint]") {
  auto enc = encode_checkpoint(small());
  REQUIRE(enc);
  const std::string bytes = *enc;
  auto failing = [&](std::uint64_t offset, std::size_t n, std::string& out) -> baton::status {
    if (offset > 0) return baton::make_error("read f: Input/output error");
    out = bytes.substr(0, n);
    return {};
  };
  auto r = checkpoint_digest_streamed(failing, bytes.size(), "f", 4);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("Input/output error"));
  // A file that is shorter than its stated size (it shrank after opening).
  const std::string shorter = bytes.substr(0, bytes.size() - 3);
  auto s = checkpoint_digest_streamed(reader_of(shorter), bytes.size(), "f", 4);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("ended"));
}

namespace {
range_reader_into reader_into(const std::string& bytes, int* reads = nullptr) {
  return [&bytes, reads](std::uint64_t offset, std::span<char> out) -> baton::status {
    if (reads) ++*reads;
    if (offset > bytes.size() || out.size() > bytes.size() - offset) {
      return baton::make_error("file ended");
    }
    std::memcpy(out.data(), bytes.data() + offset, out.size());
    return {};
  };
}
}  // namespace

TEST_CASE("a checkpoint index places every tensor, and its tensors read into their destinations",
          "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto bytes = encode_checkpoint(c);
  REQUIRE(bytes);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{5}, std::size_t{1} << 20}) {
    INFO("chunk " << chunk);
    auto idx = index_checkpoint_streamed(reader_of(*bytes), bytes->size(), "f", chunk);
    REQUIRE(idx);
    CHECK(idx->step() == 1234);
    CHECK(idx->metadata == decode_checkpoint(*bytes, "f")->metadata);
    CHECK(idx->head == bytes->substr(0, idx->tensors.at(0).offset));
    REQUIRE(idx->tensors.size() == c.tensors.size());
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      const auto& t = idx->tensors[i];
      CHECK(t.name == c.tensors[i].name);
      CHECK(t.type == c.tensors[i].type);
      CHECK(t.shape == c.tensors[i].shape);
      CHECK(bytes->substr(t.offset, t.size) == c.tensors[i].bytes);
    }
    CHECK(idx->find("rng.state") == &idx->tensors[3]);
    CHECK(idx->find("nope") == nullptr);
    // Each tensor into its own buffer, but the second one skipped (read, hashed, dropped).
    std::vector<std::string> into(c.tensors.size());
    int reads = 0;
    const auto dest = [&](const tensor_extent& t) -> std::span<char> {
      const auto i = static_cast<std::size_t>(&t - idx->tensors.data());
      if (i == 1) return {};
      into[i].assign(t.size, '?');
      return {into[i].data(), into[i].size()};
    };
    REQUIRE(read_checkpoint_tensors(*idx, reader_into(*bytes, &reads), dest, "f", chunk));
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      if (i != 1) CHECK(into[i] == c.tensors[i].bytes);
    }
    CHECK(into[1].empty());
    if (chunk == 1) CHECK(reads > 100);  // the pieces are bounded
  }
}

TEST_CASE("reading a checkpoint's tensors refuses a file changed since it was indexed",
          "[unit][checkpoint]") {
  auto enc = encode_checkpoint(small());
  REQUIRE(enc);
  const std::string bytes = *enc;
  auto idx = index_checkpoint_streamed(reader_of(bytes), bytes.size(), "/c/f");
  REQUIRE(idx);
  std::string w(8, '\0'), s(8, '\0');
  const auto dest = [&](const tensor_extent& t) -> std::span<char> {
    return t.name == "w" ? std::span<char>(w.data(), 8) : std::span<char>(s.data(), 8);
  };
  // Every flipped bit of the tensor bytes, read in a second pass: the digest no longer comes out.
  for (std::size_t i = idx->head.size() * 8; i < bytes.size() * 8; ++i) {
    std::string bad = bytes;
    bad[i / 8] = static_cast<char>(bad[i / 8] ^ (1 << (i % 8)));
    INFO("bit " << i);
    const auto r = read_checkpoint_tensors(*idx, reader_into(bad), dest, "/c/f", 3);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::StartsWith("/c/f: changed since it was verified"));
    CHECK(r.error().code == baton::errc::corrupt_data);
  }
  // A read error names the tensor; a file that shrank fails as the reader says.
  const range_reader_into failing = [](std::uint64_t, std::span<char>) -> baton::status {
    return baton::make_error("read f: Input/output error");
  };
  const auto r = read_checkpoint_tensors(*idx, failing, dest, "/c/f");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("tensor \"w\": read f: Input/output error"));
  const std::string shorter = bytes.substr(0, bytes.size() - 3);
  CHECK_FALSE(read_checkpoint_tensors(*idx, reader_into(shorter), dest, "/c/f"));
  // A destination of the wrong size is a caller bug, refused before it is written past.
  const auto wrong = [&](const tensor_extent&) { return std::span<char>(w.data(), 3); };
  const auto r2 = read_checkpoint_tensors(*idx, reader_into(bytes), wrong, "/c/f");
  REQUIRE_FALSE(r2);
  CHECK_THAT(r2.error().message, Catch::Contains("destination of tensor \"w\" holds 3 bytes"));
  // And the untouched file reads back whole.
  REQUIRE(read_checkpoint_tensors(*idx, reader_into(bytes), dest, "/c/f"));
  CHECK(w == small().tensors[0].bytes);
}

TEST_CASE("an index that leaves the digest to the read refuses damage when the tensors land",
          "[unit][checkpoint]") {
  auto enc = encode_checkpoint(small());
  REQUIRE(enc);
  const std::string bytes = *enc;
  std::string w(8, '\0'), s(8, '\0');
  const auto dest = [&](const tensor_extent& t) -> std::span<char> {
    return t.name == "w" ? std::span<char>(w.data(), 8) : std::span<char>(s.data(), 8);
  };
  auto good =
      index_checkpoint_streamed(reader_of(bytes), bytes.size(), "/c/f", 3, digest_check::on_read);
  REQUIRE(good);
  CHECK_FALSE(good->digest_checked);
  REQUIRE(read_checkpoint_tensors(*good, reader_into(bytes), dest, "/c/f", 3));
  CHECK(w == small().tensors[0].bytes);
  // Every flipped bit of the data: the index is made without reading it, and the one read of the
  // tensors refuses it as damaged, with the code a caller falls back on.
  const std::size_t data_start = good->head.size();
  for (std::size_t i = data_start * 8; i < bytes.size() * 8; ++i) {
    std::string bad = bytes;
    bad[i / 8] = static_cast<char>(bad[i / 8] ^ (1 << (i % 8)));
    INFO("bit " << i);
    auto idx =
        index_checkpoint_streamed(reader_of(bad), bad.size(), "/c/f", 3, digest_check::on_read);
    REQUIRE(idx);
    auto now = index_checkpoint_streamed(reader_of(bad), bad.size(), "/c/f", 3);
    REQUIRE_FALSE(now);  // the check made at once sees the same damage
    const auto r = read_checkpoint_tensors(*idx, reader_into(bad), dest, "/c/f", 3);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == baton::errc::corrupt_data);
    CHECK_THAT(r.error().message, Catch::StartsWith("/c/f: digest mismatch: file says xxh64:"));
  }
  // The header's own digits changed: the same refusal, at the end of the read.
  std::string other = bytes;
  const auto at = other.find("xxh64:") + 6;
  other[at] = other[at] == '0' ? '1' : '0';
  auto idx = index_checkpoint_streamed(reader_of(other), other.size(), "/c/f", 1 << 20,
                                       digest_check::on_read);
  REQUIRE(idx);
  const auto r = read_checkpoint_tensors(*idx, reader_into(other), dest, "/c/f");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == baton::errc::corrupt_data);
  // Every rule but the digest is still the index's: a damaged header is refused at once.
  std::string header = bytes;
  header[8] = '[';
  CHECK_FALSE(index_checkpoint_streamed(reader_of(header), header.size(), "/c/f", 1 << 20,
                                        digest_check::on_read));
  std::string version = bytes;
  const auto v = version.find("\"format_version\":\"") + 18;
  version[v] = '9';
  auto vr = index_checkpoint_streamed(reader_of(version), version.size(), "/c/f", 1 << 20,
                                      digest_check::on_read);
  REQUIRE_FALSE(vr);
  CHECK_THAT(vr.error().message, Catch::Contains("unsupported checkpoint format version"));
}

TEST_CASE("decode_checkpoint_view views the buffer and matches decode_checkpoint",
          "[unit][checkpoint]") {
  auto bytes = encode_checkpoint(sample());
  REQUIRE(bytes);
  auto owned = decode_checkpoint(*bytes, "mem");
  REQUIRE(owned);
  auto v = decode_checkpoint_view(*bytes, "mem");
  REQUIRE(v);
  CHECK(v->metadata == owned->metadata);
  REQUIRE(v->tensors.size() == owned->tensors.size());
  for (std::size_t i = 0; i < v->tensors.size(); ++i) {
    const auto& a = v->tensors[i];
    const auto& b = owned->tensors[i];
    CHECK(a.name == b.name);
    CHECK(a.type == b.type);
    CHECK(a.shape == b.shape);
    CHECK(a.bytes == b.bytes);
    CHECK(a.bytes.data() >= bytes->data());
    CHECK(a.bytes.data() + a.bytes.size() <= bytes->data() + bytes->size());
  }
  CHECK(v->find("rng.state") == &v->tensors[3]);
  CHECK(v->find("nope") == nullptr);
  std::string bad = *bytes;
  bad.back() ^= 1;
  auto r = decode_checkpoint_view(bad, "bad.safetensors");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("bad.safetensors") && Catch::Contains("digest"));
}

namespace streamed_write {
// The three ways a streamed write may run its hash: inline, through a side_by_side that runs
// its two tasks one after the other (a team of one), and on two real threads.
const side_by_side one_after_other = [](const std::function<void()>& a,
                                        const std::function<void()>& b) {
  a();
  b();
};
const side_by_side two_threads = [](const std::function<void()>& a,
                                    const std::function<void()>& b) {
  std::thread second(b);
  a();
  second.join();
};
std::vector<std::pair<const char*, const side_by_side*>> modes() {
  return {{"inline", nullptr}, {"one after the other", &one_after_other},
          {"two threads", &two_threads}};
}

// A file in memory that takes pieces and patches as os::writable_file does.
struct file_in_memory {
  std::string bytes;
  std::size_t pieces = 0, largest = 0, patches = 0;
  byte_sink sink() {
    return [this](std::string_view p) -> baton::status {
      bytes += p;
      if (++pieces > 1) largest = std::max(largest, p.size());
      return {};
    };
  }
  byte_patch patch() {
    return [this](std::uint64_t at, std::string_view p) -> baton::status {
      REQUIRE(at + p.size() <= bytes.size());
      bytes.replace(static_cast<std::size_t>(at), p.size(), p);
      ++patches;
      return {};
    };
  }
};
}  // namespace streamed_write

TEST_CASE("write_checkpoint_streamed writes the file in pieces and patches its digest in",
          "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto whole = encode_checkpoint(c);
  REQUIRE(whole);
  auto header = unsealed_checkpoint_header(view_of(c));
  REQUIRE(header);
  auto sealed = checkpoint_header(view_of(c));
  REQUIRE(sealed);
  REQUIRE(header->size() == sealed->size());
  CHECK(*header != *sealed);  // only the digits differ
  for (const auto& [mode, both] : streamed_write::modes()) {
    for (const std::size_t piece : {std::size_t{1}, std::size_t{5}, std::size_t{256 << 10}}) {
      INFO(mode << ", pieces of " << piece);
      streamed_write::file_in_memory f;
      auto d = write_checkpoint_streamed(view_of(c), *header, f.sink(), f.patch(), piece, both);
      REQUIRE(d);
      CHECK(f.bytes == *whole);
      CHECK(*d == *checkpoint_digest(*whole));
      CHECK(f.patches == 1);
      CHECK(f.largest <= piece);
    }
  }
}

TEST_CASE("write_checkpoint_streamed hashes the bytes it hands over, and passes errors on",
          "[unit][checkpoint]") {
  checkpoint c = sample();
  auto v = view_of(c);
  auto header = unsealed_checkpoint_header(v);
  REQUIRE(header);
  // Inline, a tensor that changes after the header went out is hashed as it is written: the file
  // holds the new byte and verifies.
  streamed_write::file_in_memory f;
  const byte_sink inner = f.sink();
  int calls = 0;
  auto d = write_checkpoint_streamed(
      v, *header,
      [&](std::string_view p) {
        if (++calls == 1) c.tensors[0].bytes[0] ^= 1;
        return inner(p);
      },
      f.patch());
  REQUIRE(d);
  CHECK(checkpoint_digest(f.bytes).value() == *d);
  CHECK(decode_checkpoint(f.bytes, "changed").value().tensors[0].bytes == c.tensors[0].bytes);

  const checkpoint clean = sample();
  auto clean_header = unsealed_checkpoint_header(view_of(clean));
  REQUIRE(clean_header);
  for (const auto& [mode, both] : streamed_write::modes()) {
    INFO(mode);
    // A sink's error stops the write, is passed on, and nothing is patched.
    std::size_t patched = 0;
    auto failed = write_checkpoint_streamed(
        view_of(clean), *clean_header,
        [n = 0](std::string_view) mutable -> baton::status {
          if (++n == 2) return baton::make_error("disk full");
          return {};
        },
        [&](std::uint64_t, std::string_view) -> baton::status {
          ++patched;
          return {};
        },
        1, both);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().message == "disk full");
    CHECK(patched == 0);
    // A sink that throws: the exception comes out of the call once the hash is done too.
    CHECK_THROWS_WITH(write_checkpoint_streamed(
                          view_of(clean), *clean_header,
                          [](std::string_view p) -> baton::status {
                            if (p.size() == 4) throw std::runtime_error("half written");
                            return {};
                          },
                          streamed_write::file_in_memory().patch(), 4, both),
                      "half written");
  }
  // A failed patch is a failed write.
  streamed_write::file_in_memory g;
  auto unpatched = write_checkpoint_streamed(
      view_of(clean), *clean_header, g.sink(),
      [](std::uint64_t, std::string_view) { return baton::make_error("patch refused"); });
  REQUIRE_FALSE(unpatched);
  CHECK(unpatched.error().message == "patch refused");
  CHECK_FALSE(checkpoint_digest(g.bytes));  // zeros where the digits go: it never verifies
  // A header whose digits are not zeros cannot be the one the digest covers.
  auto sealed = checkpoint_header(view_of(clean));
  REQUIRE(sealed);
  auto wrong = write_checkpoint_streamed(view_of(clean), *sealed, g.sink(), g.patch());
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error().message, Catch::Contains("zeroed digest"));
}

TEST_CASE("read_checkpoint_tensors hashes beside its reads and refuses the same damage",
          "[unit][checkpoint]") {
  const checkpoint c = sample();
  auto bytes = encode_checkpoint(c);
  REQUIRE(bytes);
  for (const auto& [mode, both] : streamed_write::modes()) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{5}, std::size_t{1} << 20}) {
      for (const bool skip : {false, true}) {
        INFO(mode << ", chunk " << chunk << (skip ? ", the second tensor skipped" : ""));
        auto idx = index_checkpoint_streamed(reader_of(*bytes), bytes->size(), "f", chunk,
                                             digest_check::on_read);
        REQUIRE(idx);
        std::vector<std::string> into(c.tensors.size());
        const auto dest = [&](const tensor_extent& t) -> std::span<char> {
          const auto i = static_cast<std::size_t>(&t - idx->tensors.data());
          if (skip && i == 1) return {};
          into[i].assign(t.size, '?');
          return {into[i].data(), into[i].size()};
        };
        REQUIRE(read_checkpoint_tensors(*idx, reader_into(*bytes), dest, "f", chunk, both));
        for (std::size_t i = 0; i < c.tensors.size(); ++i) {
          if (!(skip && i == 1)) CHECK(into[i] == c.tensors[i].bytes);
        }
      }
    }
  }
  auto enc = encode_checkpoint(small());
  REQUIRE(enc);
  const std::string small_bytes = *enc;
  auto idx = index_checkpoint_streamed(reader_of(small_bytes), small_bytes.size(), "/c/f", 3,
                                       digest_check::on_read);
  REQUIRE(idx);
  std::string w(8, '\0'), t(8, '\0');
  const auto dest = [&](const tensor_extent& e) -> std::span<char> {
    return e.name == "w" ? std::span<char>(w.data(), 8) : std::span<char>(t.data(), 8);
  };
  for (const auto& [mode, both] : streamed_write::modes()) {
    INFO(mode);
    // Every flipped bit of the tensor bytes: the digest no longer comes out.
    for (std::size_t i = idx->head.size() * 8; i < small_bytes.size() * 8; ++i) {
      std::string bad = small_bytes;
      bad[i / 8] = static_cast<char>(bad[i / 8] ^ (1 << (i % 8)));
      INFO("bit " << i);
      const auto r = read_checkpoint_tensors(*idx, reader_into(bad), dest, "/c/f", 3, both);
      REQUIRE_FALSE(r);
      CHECK(r.error().code == baton::errc::corrupt_data);
    }
    // A read that fails partway stops both threads and names the tensor: the hasher never waits
    // for a piece that is not coming.
    for (int fail_at = 1; fail_at <= 6; ++fail_at) {
      INFO("read " << fail_at << " fails");
      int reads = 0;
      const range_reader_into failing = [&](std::uint64_t offset,
                                            std::span<char> out) -> baton::status {
        if (++reads == fail_at) return baton::make_error("read f: Input/output error");
        return reader_into(small_bytes)(offset, out);
      };
      const auto r = read_checkpoint_tensors(*idx, failing, dest, "/c/f", 3, both);
      REQUIRE_FALSE(r);
      CHECK_THAT(r.error().message, Catch::Contains("read f: Input/output error") &&
                                        Catch::Contains("tensor \""));
    }
    REQUIRE(read_checkpoint_tensors(*idx, reader_into(small_bytes), dest, "/c/f", 3, both));
    CHECK(w == small().tensors[0].bytes);
  }
}
