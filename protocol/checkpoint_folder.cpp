#include "protocol/checkpoint_folder.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "protocol/digest.h"
#include "protocol/json_parse.h"

namespace baton::protocol {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A JSON string literal. Names a worker wrote may not be UTF-8; those are refused by the seal
// before they get here, so replacing is only a guard against a throw.
std::string quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

std::string entry_text(os::entry_kind k) {
  switch (k) {
    case os::entry_kind::missing:
      return "missing";
    case os::entry_kind::regular:
      return "a regular file";
    case os::entry_kind::directory:
      return "a folder";
    case os::entry_kind::symlink:
      return "a symlink";
    case os::entry_kind::other:
      return "a special file (FIFO, socket or device)";
  }
  return "?";
}

// The path rules of a manifest entry (protocol/README.md): relative, '/'-separated, no empty,
// "." or ".." component.
std::optional<std::string> bad_relative_path(const std::string& p) {
  if (p.empty()) return "empty path";
  if (p.front() == '/') return "path starts with /";
  if (p.find('\0') != std::string::npos) return "path holds a NUL byte";
  std::size_t start = 0;
  for (;;) {
    const auto slash = p.find('/', start);
    const std::string_view part(p.data() + start,
                                (slash == std::string::npos ? p.size() : slash) - start);
    if (part.empty()) return "empty path component";
    if (part == "." || part == "..") return "path component \"" + std::string(part) + "\"";
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (p == folder_manifest_name) return "the manifest lists itself";
  return std::nullopt;
}

struct folder_tree {
  std::vector<manifest_file> files;  // xxh64 unset
  std::vector<fs::path> dirs;        // below the top, parents before children
};

status walk(os::env& e, const fs::path& top, const fs::path& dir, const std::string& rel, int depth,
            folder_tree& out) {
  auto names = e.list_dir(dir);
  if (!names) return names.error();
  for (const auto& name : *names) {
    const fs::path p = dir / name;
    const std::string r = rel.empty() ? name : rel + "/" + name;
    auto info = e.stat_no_follow(p);
    if (!info) return info.error();
    switch (info->kind) {
      case os::entry_kind::regular:
        if (out.files.size() >= max_folder_files) {
          return make_error(top.string() + ": more than " + std::to_string(max_folder_files) +
                            " files");
        }
        out.files.push_back({r, info->size, 0});
        break;
      case os::entry_kind::directory:
        if (depth + 1 > max_folder_depth) {
          return make_error(p.string() + ": folders nested deeper than " +
                            std::to_string(max_folder_depth) + " levels");
        }
        out.dirs.push_back(p);
        if (auto s = walk(e, top, p, r, depth + 1, out); !s) return s;
        break;
      case os::entry_kind::missing:
        return make_error(p.string() + ": vanished while the folder was read");
      case os::entry_kind::symlink:
      case os::entry_kind::other:
        return make_error(p.string() + ": " + entry_text(info->kind) +
                          " (a checkpoint folder holds only regular files and folders)");
    }
  }
  return {};
}

result<folder_tree> read_tree(os::env& e, const fs::path& folder) {
  folder_tree t;
  if (auto s = walk(e, folder, folder, "", 0, t); !s) return s.error();
  std::sort(t.files.begin(), t.files.end(),
            [](const manifest_file& a, const manifest_file& b) { return a.path < b.path; });
  return t;
}

// Step in a "ckpt-<digits>" folder name, or nullopt for any other name.
std::optional<std::int64_t> step_in_name(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-";
  if (name.size() < prefix.size() + 12 || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size());
  std::int64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.front() == '-' ||
      digits.front() == '+') {
    return std::nullopt;
  }
  return step;
}

}  // namespace

std::string folder_name_for_step(std::int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld", static_cast<long long>(step));
  return buf;
}

std::string encode_manifest(const folder_manifest& m) {
  // Written by hand so the digest comes first and the layout is fixed.
  std::string out = "{\"digest\":\"";
  out += xxh64_prefix;
  const std::size_t hex_at = out.size();
  out += std::string(digest_hex_len, '0');
  out += "\",\"format\":\"";
  out += folder_format;
  out += "\",\"format_version\":" + std::to_string(folder_format_version);
  out += ",\"job\":" + quoted(m.job);
  out += ",\"step\":" + std::to_string(m.step);
  out += ",\"files\":[";
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (i > 0) out += ',';
    out += "{\"path\":" + quoted(f.path) + ",\"size\":" + std::to_string(f.size) + ",\"xxh64\":\"" +
           hex16(f.xxh64) + "\"}";
  }
  out += "]}\n";
  const std::string digest = hex16(xxh64(out));
  out.replace(hex_at, 16, digest);
  return out;
}

result<folder_manifest> decode_manifest(std::string_view bytes, std::string_view what_view) {
  const std::string what(what_view);
  const auto bad = [&](const std::string& why) { return make_error(what + ": " + why); };
  if (bytes.size() > max_manifest_bytes) {
    return bad("manifest of " + std::to_string(bytes.size()) + " bytes is larger than " +
               std::to_string(max_manifest_bytes));
  }
  auto doc = parse_json_guarded<json>(bytes, 8);
  if (!doc) return bad("not JSON: " + doc.error().message);
  if (!doc->is_object()) return bad("expected a JSON object");
  const json& j = *doc;

  const auto dg = j.find("digest");
  if (dg == j.end() || !dg->is_string()) return bad("no \"digest\" string");
  const std::string digest = dg->get<std::string>();
  std::optional<std::uint64_t> want;
  if (digest.rfind(xxh64_prefix, 0) == 0) want = parse_hex16(digest.substr(xxh64_prefix.size()));
  if (!want) return bad("digest \"" + digest + "\" is not xxh64:<16 lowercase hex digits>");
  // The digest covers the manifest's own bytes with its digits zeroed: the first occurrence of
  // the quoted digest is the field itself (it is written first, and nothing before it quotes).
  const std::string needle = "\"" + digest + "\"";
  const auto at = bytes.find(needle);
  if (at == std::string_view::npos) return bad("digest field not found in the raw bytes");
  std::string zeroed(bytes);
  zeroed.replace(at + 1 + xxh64_prefix.size(), digest_hex_len, std::string(digest_hex_len, '0'));
  if (const auto got = xxh64(zeroed); got != *want) {
    return bad("bad digest: the manifest hashes to xxh64:" + hex16(got) + ", it says " + digest +
               " (edited or corrupted)");
  }

  const auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || *fmt != folder_format) {
    return bad(std::string("format is not \"") + folder_format + "\"");
  }
  const auto ver = j.find("format_version");
  if (ver == j.end() || !ver->is_number_integer() || *ver != folder_format_version) {
    return bad("format_version " + (ver == j.end() ? std::string("missing") : ver->dump()) +
               ", this baton reads " + std::to_string(folder_format_version));
  }
  folder_manifest m;
  const auto job = j.find("job");
  if (job == j.end() || !job->is_string()) return bad("no \"job\" string");
  m.job = job->get<std::string>();
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<std::int64_t>() < 0) {
    return bad("\"step\" is not a non-negative integer");
  }
  m.step = step->get<std::int64_t>();
  const auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return bad("no \"files\" array");
  m.files.reserve(files->size());
  for (std::size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    const std::string at_i = "files[" + std::to_string(i) + "]";
    if (!f.is_object()) return bad(at_i + " is not an object");
    const auto p = f.find("path");
    const auto sz = f.find("size");
    const auto h = f.find("xxh64");
    if (p == f.end() || !p->is_string()) return bad(at_i + ".path is not a string");
    if (sz == f.end() || !sz->is_number_unsigned()) {
      return bad(at_i + ".size is not a non-negative integer");
    }
    if (h == f.end() || !h->is_string()) return bad(at_i + ".xxh64 is not a string");
    manifest_file mf;
    mf.path = p->get<std::string>();
    mf.size = sz->get<std::uint64_t>();
    const auto hv = parse_hex16(h->get<std::string>());
    if (!hv) return bad(at_i + ".xxh64 is not 16 lowercase hex digits");
    mf.xxh64 = *hv;
    if (auto why = bad_relative_path(mf.path)) return bad(at_i + " \"" + mf.path + "\": " + *why);
    if (!m.files.empty() && !(m.files.back().path < mf.path)) {
      return bad(at_i + " \"" + mf.path + "\": files not sorted by path, or listed twice");
    }
    m.files.push_back(std::move(mf));
  }
  return m;
}

namespace {

result<file_hash> hash_open_file(os::readable_file& file, const fs::path& path);

}  // namespace

result<file_hash> hash_file(os::env& e, const fs::path& path) {
  auto f = e.new_readable_file(path);
  if (!f) return f.error();
  return hash_open_file(**f, path);
}

result<file_hash> hash_file(os::env& e, const fs::path& path,
                            const os::untrusted_file_limits& limits) {
  auto f = e.new_untrusted_readable_file(path, limits);
  if (!f) return f.error();
  return hash_open_file(**f, path);
}

namespace {

result<file_hash> hash_open_file(os::readable_file& file, const fs::path& path) {
  auto* f = &file;
  file_hash out;
  out.size = f->size();
  xxh64_stream h;
  std::string chunk;  // reused: the reader keeps its size, so no zero-fill per chunk
  for (std::uint64_t off = 0; off < out.size;) {
    if (auto s = f->read(off, folder_hash_chunk_bytes, chunk); !s) return s.error();
    if (chunk.empty()) {
      return make_error(path.string() + ": ended at byte " + std::to_string(off) + " of " +
                        std::to_string(out.size) + " while it was read");
    }
    h.update(chunk);
    off += chunk.size();
  }
  out.xxh64 = h.digest();
  return out;
}

}  // namespace

result<std::vector<manifest_file>> list_folder_files(os::env& e, const fs::path& folder) {
  auto t = read_tree(e, folder);
  if (!t) return t.error();
  return std::move(t->files);
}

namespace {

// "<folder>: its files add up to more than the cap of M bytes for a checkpoint".
std::optional<error> over_cap(const fs::path& folder, const std::vector<manifest_file>& files,
                              std::uint64_t max_bytes) {
  std::uint64_t total = 0;
  for (const auto& f : files) {
    total += f.size;
    if (total > max_bytes || total < f.size) {
      return make_error(folder.string() + ": its files add up to more than the cap of " +
                        std::to_string(max_bytes) + " bytes for a checkpoint");
    }
  }
  return std::nullopt;
}

}  // namespace

result<sealed_folder> seal_checkpoint_folder(os::env& e, const fs::path& staging_folder,
                                             const fs::path& dest_dir, const std::string& job_id,
                                             std::int64_t step, std::uint64_t max_bytes) {
  const auto top = e.stat_no_follow(staging_folder);
  if (!top) return top.error();
  if (top->kind != os::entry_kind::directory) {
    return make_error(staging_folder.string() + ": " + entry_text(top->kind) + ", not a folder");
  }
  const fs::path own_manifest = staging_folder / folder_manifest_name;
  if (auto m = e.stat_no_follow(own_manifest); !m) {
    return m.error();
  } else if (m->kind != os::entry_kind::missing) {
    return make_error(own_manifest.string() +
                      ": the worker wrote a baton-manifest.json (baton writes it when it seals)");
  }
  auto tree = read_tree(e, staging_folder);
  if (!tree) return tree.error();
  if (auto too_big = over_cap(staging_folder, tree->files, max_bytes)) return *too_big;
  const os::untrusted_file_limits limits{max_bytes, staging_folder};

  sealed_folder out;
  out.manifest.job = job_id;
  out.manifest.step = step;
  for (auto& f : tree->files) {
    const fs::path p = staging_folder / fs::path(f.path).make_preferred();
    if (!is_utf8(f.path)) return make_error(p.string() + ": file name is not valid UTF-8");
    auto h = hash_file(e, p, limits);
    if (!h) return h.error();
    if (h->size != f.size) {
      return make_error(p.string() + ": changed size while it was sealed (still being written?)");
    }
    f.xxh64 = h->xxh64;
    if (auto s = e.sync_file(p); !s) return s.error();
  }
  out.manifest.files = std::move(tree->files);

  if (auto s = os::write_file_atomic(e, own_manifest, encode_manifest(out.manifest)); !s) {
    return s.error();
  }
  // Children first, so each folder's entries are on disk before the folder above is synced.
  for (auto it = tree->dirs.rbegin(); it != tree->dirs.rend(); ++it) {
    if (auto s = e.sync_dir(*it); !s) return s.error();
  }
  if (auto s = e.sync_dir(staging_folder); !s) return s.error();

  out.path = dest_dir / folder_name_for_step(step);
  auto existing = e.stat_no_follow(out.path);
  if (!existing) return existing.error();
  if (existing->kind == os::entry_kind::directory) {
    if (auto s = e.remove_dir_all(out.path); !s) return s.error();
  } else if (existing->kind != os::entry_kind::missing) {
    if (auto s = e.remove_file(out.path); !s) return s.error();
  }
  if (auto s = e.rename_file(staging_folder, out.path); !s) return s.error();
  if (auto s = e.sync_dir(dest_dir); !s) return s.error();
  return out;
}

result<folder_manifest> verify_checkpoint_folder(os::env& e, const fs::path& folder,
                                                 std::uint64_t max_bytes) {
  const std::string where = folder.string();
  const auto top = e.stat_no_follow(folder);
  if (!top) return top.error();
  if (top->kind != os::entry_kind::directory) {
    return make_error(where + ": " + entry_text(top->kind) + ", not a checkpoint folder");
  }
  const fs::path manifest_path = folder / folder_manifest_name;
  const std::string mwhat = manifest_path.string();
  auto minfo = e.stat_no_follow(manifest_path);
  if (!minfo) return minfo.error();
  if (minfo->kind == os::entry_kind::missing) {
    return make_error(mwhat + ": missing (the folder was never sealed)");
  }
  if (minfo->kind != os::entry_kind::regular) {
    return make_error(mwhat + ": " + entry_text(minfo->kind) + ", not a regular file");
  }
  if (minfo->size > max_manifest_bytes) {
    return make_error(mwhat + ": " + std::to_string(minfo->size) + " bytes, larger than " +
                      std::to_string(max_manifest_bytes));
  }
  auto mfile = e.new_untrusted_readable_file(manifest_path, {max_manifest_bytes, folder});
  if (!mfile) return mfile.error();
  std::string bytes;
  if (auto s = (*mfile)->read(0, static_cast<std::size_t>((*mfile)->size()), bytes); !s) {
    return s.error();
  }
  mfile->reset();
  auto m = decode_manifest(bytes, mwhat);
  if (!m) return m.error();
  if (auto too_big = over_cap(folder, m->files, max_bytes)) return *too_big;
  const os::untrusted_file_limits limits{max_bytes, folder};
  if (const auto named = step_in_name(folder.filename().string()); named && *named != m->step) {
    return make_error(mwhat + ": says step " + std::to_string(m->step) + ", the folder name " +
                      std::to_string(*named));
  }

  auto tree = read_tree(e, folder);
  if (!tree) return tree.error();
  // Cheap checks first (names and sizes), so a damaged folder is refused before any hashing.
  auto& present = tree->files;
  present.erase(
      std::remove_if(present.begin(), present.end(),
                     [](const manifest_file& f) { return f.path == folder_manifest_name; }),
      present.end());
  std::size_t i = 0;
  for (const auto& want : m->files) {
    if (i < present.size() && present[i].path < want.path) {
      return make_error((folder / fs::path(present[i].path).make_preferred()).string() +
                        ": extra file (not in the manifest)");
    }
    const fs::path p = folder / fs::path(want.path).make_preferred();
    if (i == present.size() || present[i].path != want.path) {
      auto info = e.stat_no_follow(p);
      if (info && info->kind != os::entry_kind::missing) {
        return make_error(p.string() + ": " + entry_text(info->kind) +
                          ", the manifest lists a regular file");
      }
      return make_error(p.string() + ": missing (listed in the manifest)");
    }
    if (present[i].size != want.size) {
      return make_error(p.string() + ": " + std::to_string(present[i].size) +
                        " bytes, the manifest says " + std::to_string(want.size));
    }
    ++i;
  }
  if (i < present.size()) {
    return make_error((folder / fs::path(present[i].path).make_preferred()).string() +
                      ": extra file (not in the manifest)");
  }
  for (const auto& want : m->files) {
    const fs::path p = folder / fs::path(want.path).make_preferred();
    auto h = hash_file(e, p, limits);
    if (!h) return h.error();
    if (h->size != want.size) {
      return make_error(p.string() + ": " + std::to_string(h->size) + " bytes, the manifest says " +
                        std::to_string(want.size));
    }
    if (h->xxh64 != want.xxh64) {
      return make_error(p.string() + ": content hashes to xxh64 " + hex16(h->xxh64) +
                        ", the manifest says " + hex16(want.xxh64));
    }
  }
  return m;
}

}  // namespace baton::protocol
