#include "protocol/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "protocol/digest.h"
#include "protocol/json_parse.h"

namespace baton::protocol {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* format_name = "baton-checkpoint";
// Far above any real header (a few KiB for hundreds of tensors) yet small enough that a lying
// length prefix can never make us parse or allocate much.
constexpr std::uint64_t max_header_bytes = 100ull << 20;
// A safetensors header nests three deep (root, tensor, shape); the slack is for foreign writers.
constexpr std::size_t max_header_depth = 8;

constexpr struct {
  dtype type;
  std::string_view name;
  std::size_t size;
} dtype_table[] = {
    {dtype::f32, "F32", 4}, {dtype::f64, "F64", 8}, {dtype::i64, "I64", 8}, {dtype::u64, "U64", 8},
    {dtype::u32, "U32", 4}, {dtype::i32, "I32", 4}, {dtype::u8, "U8", 1},
};

bool parse_dtype(std::string_view s, dtype& out) {
  for (const auto& d : dtype_table) {
    if (d.name == s) {
      out = d.type;
      return true;
    }
  }
  return false;
}

// Strict decimal: digits only, no sign, no leading zeros (except "0"), fits in int64.
bool parse_decimal(std::string_view s, std::int64_t& out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Number of bytes a tensor of `shape` and `type` needs; false on a negative dim or overflow.
bool byte_size(const std::vector<std::int64_t>& shape, dtype type, std::uint64_t& out) {
  std::uint64_t n = dtype_size(type);
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<std::uint64_t>::max() / ud) return false;
    n *= ud;
  }
  out = n;
  return true;
}

// append(), not "\"" + std::string(s): GCC 12 at -O3 flags the latter with a false -Wrestrict
// (GCC bug 105329) once the inlining around it changes.
std::string in_quotes(std::string_view s) { return std::string("\"").append(s).append("\""); }

// xxh64 of `bytes` as if the 16 characters at `hex_pos` were all '0'.
std::uint64_t digest_with_hole(std::string_view bytes, std::size_t hex_pos) {
  static const std::string zeros(digest_hex_len, '0');
  xxh64_stream h;
  h.update(bytes.substr(0, hex_pos));
  h.update(zeros);
  h.update(bytes.substr(hex_pos + digest_hex_len));
  return h.digest();
}

std::uint64_t read_le64(std::string_view b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  return v;
}

// A verified file: metadata plus where each tensor lives. Tensor bytes are not copied, so
// checkpoint_digest can verify without doubling memory.
struct entry {
  std::string name;
  dtype type;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;  // relative to the data buffer
};
struct parsed {
  bool have_metadata = false;
  std::map<std::string, std::string> metadata;
  std::vector<entry> entries;  // in data order
  std::size_t data_start = 0;
};

result<std::int64_t> json_offset(const ojson& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return make_error("offset " + std::to_string(u) + " is out of range");
    }
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return make_error("offset " + v.dump() + " is negative");
  return make_error("offset " + v.dump() + " is not an integer");
}

result<entry> parse_entry(const std::string& name, const ojson& v) {
  if (!v.is_object()) return make_error("expected an object, got " + std::string(v.type_name()));
  entry e{name, dtype::f32, {}, 0, 0};
  for (const auto& [k, _] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      return make_error("unknown field " + in_quotes(k));
    }
  }
  const auto dt = v.find("dtype");
  if (dt == v.end()) return make_error("missing \"dtype\"");
  if (!dt->is_string()) return make_error("\"dtype\" is not a string");
  if (!parse_dtype(dt->get_ref<const std::string&>(), e.type)) {
    return make_error("unknown dtype " + dt->dump());
  }
  const auto sh = v.find("shape");
  if (sh == v.end()) return make_error("missing \"shape\"");
  if (!sh->is_array()) return make_error("\"shape\" is not an array");
  for (const auto& d : *sh) {
    if (d.is_number_unsigned()) {
      const auto u = d.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return make_error("shape dimension " + d.dump() + " is out of range");
      }
      e.shape.push_back(static_cast<std::int64_t>(u));
    } else if (d.is_number_integer()) {
      return make_error("shape dimension " + d.dump() + " is negative");
    } else {
      return make_error("shape dimension " + d.dump() + " is not an integer");
    }
  }
  const auto off = v.find("data_offsets");
  if (off == v.end()) return make_error("missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2) {
    return make_error("\"data_offsets\" is not an array of two integers");
  }
  auto b = json_offset((*off)[0]);
  if (!b) return make_error("data_offsets: " + b.error().message);
  auto en = json_offset((*off)[1]);
  if (!en) return make_error("data_offsets: " + en.error().message);
  if (*en < *b) {
    return make_error("data_offsets [" + std::to_string(*b) + ", " + std::to_string(*en) +
                      "] end before they begin");
  }
  e.begin = static_cast<std::uint64_t>(*b);
  e.end = static_cast<std::uint64_t>(*en);
  std::uint64_t need = 0;
  if (!byte_size(e.shape, e.type, need)) {
    return make_error("shape " + sh->dump() + " overflows");
  }
  if (need != e.end - e.begin) {
    return make_error("shape " + sh->dump() + " of " + std::string(to_string(e.type)) + " needs " +
                      std::to_string(need) + " bytes but data_offsets [" + std::to_string(e.begin) +
                      ", " + std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin));
  }
  return e;
}

// Everything a safetensors reader must check: length prefix, header JSON, entries, and that the
// tensors tile the data buffer. __metadata__ is optional here.
// `head` is the file's start: all of it, or at least the 8-byte prefix plus the header it
// announces (less only when the length prefix is out of bounds); `file_size` is its length.
result<parsed> parse_layout(std::string_view head, std::uint64_t file_size, std::string_view what) {
  const auto fail = [&](const std::string& msg) -> error {
    return make_error(std::string(what) + ": " + msg);
  };
  if (file_size < 8 || head.size() < 8) {
    return fail("file is " + std::to_string(file_size) +
                " bytes, shorter than the 8-byte header length");
  }
  const std::uint64_t n = read_le64(head);
  if (n > max_header_bytes) {
    return fail("header length " + std::to_string(n) + " at byte 0 exceeds the limit of " +
                std::to_string(max_header_bytes));
  }
  if (n > file_size - 8) {
    return fail("header length " + std::to_string(n) +
                " at byte 0 runs past the end of the file (" + std::to_string(file_size) +
                " bytes)");
  }
  if (n > head.size() - 8) return fail("internal error: header not read");
  const std::string_view header = head.substr(8, n);
  auto doc = parse_json_guarded<ojson>(header, max_header_depth, 8);
  if (!doc) return fail("header: " + doc.error().message);
  if (!doc->is_object()) {
    return fail("header at byte 8 is a JSON " + std::string(doc->type_name()) +
                ", expected an object");
  }

  parsed p;
  p.data_start = 8 + static_cast<std::size_t>(n);
  for (const auto& [key, value] : doc->items()) {
    if (key == "__metadata__") {
      p.have_metadata = true;
      if (!value.is_object()) return fail("__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return fail("__metadata__ value " + in_quotes(mk) + " is not a string");
        p.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    // encode_checkpoint refuses an empty name, so accepting one here would load a checkpoint
    // that cannot be written back.
    if (key.empty()) return fail("tensor with an empty name");
    auto e = parse_entry(key, value);
    if (!e) return fail("tensor " + in_quotes(key) + ": " + e.error().message);
    p.entries.push_back(std::move(*e));
  }
  // Layout: tensors must tile the data buffer exactly, as strict safetensors readers require.
  std::stable_sort(p.entries.begin(), p.entries.end(), [](const entry& a, const entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t data_size = file_size - p.data_start;
  std::uint64_t at = 0;
  for (const auto& e : p.entries) {
    if (e.begin != at) {
      return fail(
          "tensor " + in_quotes(e.name) + " starts at data byte " + std::to_string(e.begin) +
          " (file byte " + std::to_string(p.data_start + e.begin) + ") but the previous " +
          "tensor ends at " + std::to_string(at) + (e.begin < at ? " (overlap)" : " (gap)"));
    }
    if (e.end > data_size) {
      return fail("tensor " + in_quotes(e.name) + " data_offsets end " + std::to_string(e.end) +
                  " is past the end of the data buffer (" + std::to_string(data_size) + " bytes)");
    }
    at = e.end;
  }
  if (at != data_size) {
    return fail(std::to_string(data_size - at) +
                " trailing bytes after the last tensor, at file byte " +
                std::to_string(p.data_start + at));
  }
  return p;
}

// baton's own rules on top of the layout: format, version (before the digest, because a future
// version may define the digest differently), digest over the whole file, and step.
// Hashes the whole file with the 16 characters at `hex_pos` (inside the header) read as '0'.
using hole_digest = std::function<result<std::uint64_t>(std::size_t hex_pos)>;

status verify_baton(const parsed& p, std::string_view head, const hole_digest& digest,
                    std::string_view what) {
  const auto fail = [&](const std::string& msg) -> error {
    return make_error(std::string(what) + ": " + msg);
  };
  const std::string_view header = head.substr(8, p.data_start - 8);
  if (!p.have_metadata) return fail("header has no __metadata__");

  // Version first: a future version may compute its digest differently.
  const auto meta_get = [&](const char* k) -> const std::string* {
    auto it = p.metadata.find(k);
    return it == p.metadata.end() ? nullptr : &it->second;
  };
  const std::string* fmt = meta_get(meta::format);
  if (fmt == nullptr) return fail("metadata has no \"format\" (not a baton checkpoint)");
  if (*fmt != format_name)
    return fail("metadata format " + in_quotes(*fmt) + " is not " + in_quotes(format_name));
  const std::string* ver = meta_get(meta::format_version);
  if (ver == nullptr) return fail("metadata has no \"format_version\"");
  std::int64_t version = 0;
  if (!parse_decimal(*ver, version))
    return fail("metadata format_version " + in_quotes(*ver) + " is not a number");
  if (version != checkpoint_format_version) {
    return fail("unsupported checkpoint format version " + std::to_string(version) +
                " (this build reads " + std::to_string(checkpoint_format_version) + ")");
  }

  const std::string* dig = meta_get(meta::digest);
  if (dig == nullptr) return fail("metadata has no \"digest\"");
  const std::string_view dv = *dig;
  if (dv.rfind(xxh64_prefix, 0) != 0 || !parse_hex16(dv.substr(xxh64_prefix.size()))) {
    return fail("metadata digest " + in_quotes(dv) +
                " is not \"xxh64:\" and 16 lowercase hex digits");
  }
  // The digest covers the whole file with its own hex digits read as zeros; the value must occur
  // exactly once in the header or which digits are "its own" would be ambiguous.
  const std::string needle = in_quotes(dv);
  const std::size_t pos = header.find(needle);
  if (pos == std::string_view::npos) {
    return fail("metadata digest is escaped in the header; cannot locate it");
  }
  if (header.find(needle, pos + 1) != std::string_view::npos) {
    return fail("metadata digest value occurs more than once in the header");
  }
  const std::size_t hex_pos = 8 + pos + 1 + xxh64_prefix.size();
  auto hashed = digest(hex_pos);
  if (!hashed) return fail(hashed.error().message);
  const std::string actual = hex16(*hashed);
  if (actual != dv.substr(6)) {
    return fail("digest mismatch: file says " + std::string(dv) +
                ", content hashes to xxh64:" + actual + " (corrupt or modified file)");
  }

  const std::string* step = meta_get(meta::step);
  std::int64_t step_value = 0;
  if (step == nullptr) return fail("metadata has no \"step\"");
  if (!parse_decimal(*step, step_value)) {
    return fail("metadata step " + in_quotes(*step) + " is not a non-negative integer");
  }

  return {};
}

result<parsed> parse_file(std::string_view bytes, std::string_view what) {
  auto p = parse_layout(bytes, bytes.size(), what);
  if (!p) return p.error();
  const auto digest = [&](std::size_t hex_pos) -> result<std::uint64_t> {
    return digest_with_hole(bytes, hex_pos);
  };
  if (auto ok = verify_baton(*p, bytes, digest, what); !ok) return ok.error();
  return p;
}

}  // namespace

std::string_view to_string(dtype t) {
  for (const auto& d : dtype_table) {
    if (d.type == t) return d.name;
  }
  return "?";
}

std::size_t dtype_size(dtype t) {
  for (const auto& d : dtype_table) {
    if (d.type == t) return d.size;
  }
  return 0;
}

const tensor* checkpoint::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::int64_t checkpoint::step() const {
  auto it = metadata.find(meta::step);
  std::int64_t v = 0;
  if (it == metadata.end() || !parse_decimal(it->second, v)) return 0;
  return v;
}

namespace {

// How every baton header starts, up to the digest's hex digits (checkpoint_header puts it
// first): the digits sit at a fixed offset of the file.
const std::string& header_before_digest() {
  static const std::string s = std::string("{\"__metadata__\":{\"digest\":\"").append(xxh64_prefix);
  return s;
}
std::size_t digest_hex_offset() { return 8 + header_before_digest().size(); }

}  // namespace

result<std::string> unsealed_checkpoint_header(const checkpoint_view& c) {
  auto it = c.metadata.find(meta::step);
  std::int64_t step = 0;
  if (it == c.metadata.end()) return make_error("checkpoint metadata has no \"step\"");
  if (!parse_decimal(it->second, step)) {
    return make_error("checkpoint metadata step " + in_quotes(it->second) +
                      " is not a non-negative integer");
  }

  ojson header = ojson::object();
  ojson md = ojson::object();
  // Digest first, so its position in the file is fixed and nothing in user metadata precedes it.
  md[meta::digest] = std::string(xxh64_prefix) + std::string(digest_hex_len, '0');
  md[meta::format] = format_name;
  md[meta::format_version] = std::to_string(checkpoint_format_version);
  for (const auto& [k, v] : c.metadata) {
    if (k == meta::digest || k == meta::format || k == meta::format_version) continue;
    md[k] = v;
  }
  header["__metadata__"] = std::move(md);

  std::uint64_t offset = 0;
  std::set<std::string_view> names;
  for (const auto& t : c.tensors) {
    if (t.name.empty()) return make_error("checkpoint has a tensor with an empty name");
    if (t.name == "__metadata__") return make_error("a tensor cannot be named \"__metadata__\"");
    if (!names.insert(t.name).second) return make_error("duplicate tensor " + in_quotes(t.name));
    std::uint64_t need = 0;
    if (dtype_size(t.type) == 0 || !byte_size(t.shape, t.type, need)) {
      return make_error("tensor " + in_quotes(t.name) + " has an invalid dtype or shape");
    }
    if (need != t.bytes.size()) {
      return make_error("tensor " + in_quotes(t.name) + ": shape needs " + std::to_string(need) +
                        " bytes of " + std::string(to_string(t.type)) + " but it holds " +
                        std::to_string(t.bytes.size()));
    }
    header[t.name] = {{"dtype", to_string(t.type)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + need}}};
    offset += need;
  }

  std::string json;
  try {
    json = header.dump(-1, ' ', false, ojson::error_handler_t::strict);
  } catch (const ojson::exception& e) {
    return make_error(std::string("checkpoint metadata or tensor name is not valid UTF-8: ") +
                      e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size());
  std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;

  const std::string& hole = header_before_digest();
  if (out.compare(8, hole.size(), hole) != 0) {
    return make_error("internal error: checkpoint header does not start with the digest");
  }
  return out;
}

namespace {

// Runs a and b through `both`, or one after the other without it, and passes on the first
// exception either threw once both are done: nothing may escape a thread `both` runs them on.
void run_both(const side_by_side* both, const std::function<void()>& a,
              const std::function<void()>& b) {
  if (both == nullptr) {
    a();
    b();
    return;
  }
  std::exception_ptr thrown_a, thrown_b;
  (*both)(
      [&] {
        try {
          a();
        } catch (...) {
          thrown_a = std::current_exception();
        }
      },
      [&] {
        try {
          b();
        } catch (...) {
          thrown_b = std::current_exception();
        }
      });
  if (thrown_a) std::rethrow_exception(thrown_a);
  if (thrown_b) std::rethrow_exception(thrown_b);
}

}  // namespace

result<std::string> checkpoint_header(const checkpoint_view& c) {
  auto out = unsealed_checkpoint_header(c);
  if (!out) return out;
  // The placeholder is all zeros already, which is what the digest reads in its place.
  xxh64_stream h;
  h.update(*out);
  for (const auto& t : c.tensors) h.update(t.bytes);
  out->replace(digest_hex_offset(), digest_hex_len, hex16(h.digest()));
  return out;
}

result<std::string> write_checkpoint_streamed(const checkpoint_view& c, std::string_view header,
                                              const byte_sink& sink, const byte_patch& patch,
                                              std::size_t piece_bytes, const side_by_side* both) {
  const std::size_t hex_pos = digest_hex_offset();
  if (header.size() < hex_pos + digest_hex_len ||
      header.substr(hex_pos, digest_hex_len) != std::string(digest_hex_len, '0')) {
    return make_error("internal error: checkpoint header has no zeroed digest to fill in");
  }
  if (piece_bytes == 0) piece_bytes = 1;
  xxh64_stream h;
  h.update(header);
  if (auto s = sink(header); !s) return s.error();
  status written;
  if (both == nullptr) {
    for (const auto& t : c.tensors) {
      for (std::size_t at = 0; at < t.bytes.size() && written; at += piece_bytes) {
        const std::string_view piece = t.bytes.substr(at, piece_bytes);
        // Hashed first, then handed over: the sink's copy reads it from cache.
        h.update(piece);
        written = sink(piece);
      }
    }
  } else {
    run_both(
        both,
        [&] {
          for (const auto& t : c.tensors) {
            for (std::size_t at = 0; at < t.bytes.size() && written; at += piece_bytes) {
              written = sink(t.bytes.substr(at, piece_bytes));
            }
          }
        },
        [&] {
          for (const auto& t : c.tensors) h.update(t.bytes);
        });
  }
  if (!written) return written.error();
  const std::string digits = hex16(h.digest());
  if (auto s = patch(hex_pos, digits); !s) return s.error();
  return std::string(xxh64_prefix).append(digits);
}

std::int64_t checkpoint_view::step() const {
  auto it = metadata.find(meta::step);
  std::int64_t v = 0;
  if (it == metadata.end() || !parse_decimal(it->second, v)) return 0;
  return v;
}

const tensor_view* checkpoint_view::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

checkpoint_view view_of(const checkpoint& c) {
  checkpoint_view v;
  v.metadata = c.metadata;
  v.tensors.reserve(c.tensors.size());
  for (const auto& t : c.tensors) v.tensors.push_back({t.name, t.type, t.shape, t.bytes});
  return v;
}

status write_checkpoint(const checkpoint_view& c, const byte_sink& sink) {
  auto header = checkpoint_header(c);
  if (!header) return header.error();
  if (auto s = sink(*header); !s) return s;
  for (const auto& t : c.tensors) {
    if (t.bytes.empty()) continue;
    if (auto s = sink(t.bytes); !s) return s;
  }
  return {};
}

result<std::string> encode_checkpoint(const checkpoint& c) {
  const checkpoint_view v = view_of(c);
  auto header = checkpoint_header(v);
  if (!header) return header.error();
  std::string out = std::move(*header);
  std::size_t total = out.size();
  for (const auto& t : v.tensors) total += t.bytes.size();
  out.reserve(total);
  for (const auto& t : v.tensors) out += t.bytes;
  return out;
}

result<std::string> checkpoint_digest_streamed(const range_reader& read, std::uint64_t file_size,
                                               std::string_view what, std::size_t chunk_bytes) {
  auto s = checkpoint_summary_streamed(read, file_size, what, chunk_bytes);
  if (!s) return s.error();
  return std::move(s->digest);
}

result<checkpoint_summary> checkpoint_summary_streamed(const range_reader& read,
                                                       std::uint64_t file_size,
                                                       std::string_view what,
                                                       std::size_t chunk_bytes) {
  auto c = index_checkpoint_streamed(read, file_size, what, chunk_bytes);
  if (!c) return c.error();
  checkpoint_summary out;
  out.digest = c->metadata.at(meta::digest);
  out.step = c->step();
  return out;
}

const tensor_extent* checkpoint_index::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::int64_t checkpoint_index::step() const {
  auto it = metadata.find(meta::step);
  std::int64_t v = 0;
  if (it == metadata.end() || !parse_decimal(it->second, v)) return 0;
  return v;
}

result<checkpoint_index> index_checkpoint_streamed(const range_reader& read,
                                                   std::uint64_t file_size, std::string_view what,
                                                   std::size_t chunk_bytes, digest_check check) {
  if (chunk_bytes == 0) chunk_bytes = 1;
  const auto fail = [&](const error& e) -> error {
    return make_error(std::string(what) + ": " + e.message);
  };
  // The prefix, then exactly the header it announces (bounded by the header limit), so
  // parse_layout sees what it would see in the whole file.
  std::string head;
  if (auto s = read(0, static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 8)), head); !s)
    return fail(s.error());
  if (head.size() == 8) {
    const std::uint64_t n = std::min(read_le64(head), max_header_bytes);
    const std::uint64_t want = std::min<std::uint64_t>(file_size, 8 + n);
    if (auto s = read(0, static_cast<std::size_t>(want), head); !s) return fail(s.error());
    if (head.size() != want) {
      return make_error(std::string(what) + ": file shrank while being read (" +
                        std::to_string(head.size()) + " of " + std::to_string(want) +
                        " header bytes)");
    }
  }
  auto p = parse_layout(head, file_size, what);
  if (!p) return p.error();
  const auto digest = [&](std::size_t hex_pos) -> result<std::uint64_t> {
    if (check == digest_check::on_read) {
      // The value the header declares, so every other rule is still checked here; the hash of
      // the data is read_checkpoint_tensors' to compute.
      const auto declared = parse_hex16(std::string_view(head).substr(hex_pos, digest_hex_len));
      if (!declared) return make_error("internal error: the digest digits moved in the header");
      return *declared;
    }
    static const std::string zeros(digest_hex_len, '0');
    const std::string_view h = std::string_view(head).substr(0, p->data_start);
    xxh64_stream x;
    x.update(h.substr(0, hex_pos));
    x.update(zeros);
    x.update(h.substr(hex_pos + digest_hex_len));
    std::string chunk;
    for (std::uint64_t at = p->data_start; at < file_size;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, file_size - at));
      if (auto s = read(at, n, chunk); !s) return s.error();
      if (chunk.size() != n) {
        return make_error("file ended at byte " + std::to_string(at + chunk.size()) +
                          " while reading it, expected " + std::to_string(file_size));
      }
      x.update(chunk);
      at += n;
    }
    return x.digest();
  };
  if (auto ok = verify_baton(*p, head, digest, what); !ok) return ok.error();
  checkpoint_index out;
  out.metadata = std::move(p->metadata);
  out.tensors.reserve(p->entries.size());
  for (auto& e : p->entries) {
    out.tensors.push_back(
        {std::move(e.name), e.type, std::move(e.shape), p->data_start + e.begin, e.end - e.begin});
  }
  head.resize(p->data_start);
  out.head = std::move(head);
  out.file_size = file_size;
  out.digest_checked = check == digest_check::now;
  return out;
}

status read_checkpoint_tensors(const checkpoint_index& c, const range_reader_into& read,
                               const tensor_destination& dest, std::string_view what,
                               std::size_t chunk_bytes, const side_by_side* both) {
  const auto fail = [&](const std::string& msg) -> error {
    return make_error(std::string(what) + ": " + msg);
  };
  if (chunk_bytes == 0) chunk_bytes = 1;
  auto dig = c.metadata.find(meta::digest);
  if (dig == c.metadata.end() || c.head.size() < 8) {
    return fail("internal error: not an index of a verified checkpoint");
  }
  // The digest as index_checkpoint_streamed found it. Its position: checkpoint_header puts the
  // digest first, but a file from another writer may not, so look for it as verify_baton does.
  const std::string needle = in_quotes(dig->second);
  const std::size_t at = c.head.find(needle, 8);
  if (at == std::string::npos) return fail("internal error: digest not in the indexed header");
  static const std::string zeros(digest_hex_len, '0');
  const std::size_t hole = at + 1 + xxh64_prefix.size();
  xxh64_stream h;
  h.update(std::string_view(c.head).substr(0, hole));
  h.update(zeros);
  h.update(std::string_view(c.head).substr(hole + digest_hex_len));

  // Every piece in file order, each where it lands: its tensor's destination, or (a skipped
  // tensor) the one scratch buffer, which only a piece-after-piece read can share.
  struct piece {
    const tensor_extent* tensor;
    std::uint64_t done;  // bytes of the tensor before this piece
    char* to;            // null: the scratch buffer
    std::size_t size;
    std::string_view bytes() const { return {to, size}; }
  };
  std::vector<piece> pieces;
  std::string scratch;
  bool skips = false;
  std::uint64_t next = c.head.size();  // the tensors tile the file from here, in order
  for (const auto& t : c.tensors) {
    if (t.offset != next) return fail("internal error: tensors of the index do not tile the file");
    std::span<char> to = dest(t);
    if (!to.empty() && to.size() != t.size) {
      return fail("internal error: destination of tensor " + in_quotes(t.name) + " holds " +
                  std::to_string(to.size()) + " bytes, the tensor " + std::to_string(t.size));
    }
    if (to.empty() && t.size > 0) {
      skips = true;
      scratch.resize(std::max<std::size_t>(
          scratch.size(), static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, t.size))));
    }
    for (std::uint64_t done = 0; done < t.size;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, t.size - done));
      pieces.push_back({&t, done, to.empty() ? nullptr : to.data() + done, n});
      done += n;
    }
    next += t.size;
  }
  if (next != c.file_size) return fail("internal error: tensors of the index end before the file");

  const auto read_piece = [&](piece& p) -> status {
    if (p.to == nullptr) p.to = scratch.data();
    if (auto s = read(p.tensor->offset + p.done, std::span<char>(p.to, p.size)); !s) {
      return fail("tensor " + in_quotes(p.tensor->name) + ": " + s.error().message);
    }
    return {};
  };
  status got;
  if (both == nullptr || skips) {
    for (auto& p : pieces) {
      if (got = read_piece(p); !got) break;
      h.update(p.bytes());
    }
  } else {
    // The reader publishes how many pieces have landed; the hasher follows it, in order.
    std::mutex mu;
    std::condition_variable landed_more;
    std::size_t landed = 0;
    bool reader_done = false;
    run_both(
        both,
        [&] {
          status s;
          std::size_t i = 0;
          for (; i < pieces.size(); ++i) {
            if (s = read_piece(pieces[i]); !s) break;
            std::lock_guard lock(mu);
            landed = i + 1;
            landed_more.notify_one();
          }
          std::lock_guard lock(mu);
          got = std::move(s);
          reader_done = true;
          landed_more.notify_one();
        },
        [&] {
          for (std::size_t i = 0; i < pieces.size(); ++i) {
            {
              std::unique_lock lock(mu);
              landed_more.wait(lock, [&] { return landed > i || reader_done; });
              if (landed <= i) return;  // the reader stopped short: its error says why
            }
            h.update(pieces[i].bytes());
          }
        });
  }
  if (!got) return got;
  const std::string actual = hex16(h.digest());
  if (std::string(xxh64_prefix).append(actual) != dig->second) {
    const std::string msg = c.digest_checked
                                ? "changed since it was verified: it says " + dig->second +
                                      ", the bytes read now hash to xxh64:" + actual
                                : "digest mismatch: file says " + dig->second +
                                      ", content hashes to xxh64:" + actual +
                                      " (corrupt or modified file)";
    return make_error(std::string(what) + ": " + msg, errc::corrupt_data);
  }
  return {};
}

namespace {
checkpoint materialise(parsed& p, std::string_view bytes) {
  checkpoint c;
  c.metadata = std::move(p.metadata);
  c.tensors.reserve(p.entries.size());
  for (auto& e : p.entries) {
    tensor t;
    t.name = std::move(e.name);
    t.type = e.type;
    t.shape = std::move(e.shape);
    t.bytes.assign(bytes.substr(p.data_start + e.begin, e.end - e.begin));
    c.tensors.push_back(std::move(t));
  }
  return c;
}
}  // namespace

result<checkpoint> decode_safetensors(std::string_view bytes, std::string_view what) {
  auto p = parse_layout(bytes, bytes.size(), what);
  if (!p) return p.error();
  return materialise(*p, bytes);
}

result<checkpoint> decode_checkpoint(std::string_view bytes, std::string_view what) {
  auto p = parse_file(bytes, what);
  if (!p) return p.error();
  return materialise(*p, bytes);
}

result<checkpoint_view> decode_checkpoint_view(std::string_view bytes, std::string_view what) {
  auto p = parse_file(bytes, what);
  if (!p) return p.error();
  checkpoint_view c;
  c.metadata = std::move(p->metadata);
  c.tensors.reserve(p->entries.size());
  for (auto& e : p->entries) {
    c.tensors.push_back({std::move(e.name), e.type, std::move(e.shape),
                         bytes.substr(p->data_start + e.begin, e.end - e.begin)});
  }
  return c;
}

result<std::string> checkpoint_digest(std::string_view bytes) {
  auto p = parse_file(bytes, "checkpoint");
  if (!p) return p.error();
  return p->metadata.at(meta::digest);
}

}  // namespace baton::protocol
