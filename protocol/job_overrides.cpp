#include "protocol/job_overrides.h"

#include <charconv>
#include <optional>

#include "protocol/document_file.h"
#include "protocol/json_parse.h"

namespace baton::protocol {

using json = nlohmann::json;

namespace {

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
  return out;
}

std::optional<std::size_t> index_of(const std::string& segment) {
  std::size_t i = 0;
  const auto* end = segment.data() + segment.size();
  const auto [ptr, ec] = std::from_chars(segment.data(), end, i);
  if (segment.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return i;
}

// The value at `path`, or null when any step is missing.
const json* find(const json& doc, const std::vector<std::string>& path) {
  const json* at = &doc;
  for (const auto& seg : path) {
    if (at->is_object()) {
      const auto it = at->find(seg);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      const auto i = index_of(seg);
      if (!i || *i >= at->size()) return nullptr;
      at = &(*at)[*i];
    } else {
      return nullptr;
    }
  }
  return at;
}

std::optional<json> as_json(const std::string& text) {
  const auto scan =
      scan_json(text, json_limits{.max_depth = static_cast<std::size_t>(max_job_document_depth)});
  if (scan.fault) return std::nullopt;
  return build_scanned_json<json>(text);
}

std::string kind_of(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    default:
      return "a number";
  }
}

}  // namespace

result<job_override> parse_override(std::string_view arg) {
  const auto eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return make_error("--set '" + std::string(arg) +
                      "': expected PATH=VALUE, e.g. training.optimizer.learning_rate=0.01");
  }
  job_override o;
  o.text = std::string(arg);
  o.value = std::string(arg.substr(eq + 1));
  std::string_view path = arg.substr(0, eq);
  while (true) {
    const auto dot = path.find('.');
    const auto seg = path.substr(0, dot);
    if (seg.empty()) {
      return make_error("--set '" + std::string(arg) + "': empty segment in the path '" +
                        std::string(arg.substr(0, eq)) + "'");
    }
    o.path.emplace_back(seg);
    if (dot == std::string_view::npos) break;
    path = path.substr(dot + 1);
  }
  return o;
}

result<json> apply_overrides(json doc, const std::vector<job_override>& sets) {
  if (!doc.is_object()) return make_error("--set: the job document is not a JSON object");
  for (const auto& o : sets) {
    const std::string where = dotted(o.path);
    // The type the spec gives the field: the document's own value, else the default the spec
    // fills in (the document as normalised, when it parses at all).
    const json* typed = find(doc, o.path);
    json normalised;
    if (!typed) {
      if (auto spec = parse_job_spec(doc.dump(), "/")) {
        normalised = to_json(*spec);
        typed = find(normalised, o.path);
      }
    }
    // `typed` may point into `doc`, which the walk below changes: copy what is needed first.
    const std::optional<json::value_t> field_type =
        typed ? std::optional<json::value_t>(typed->type()) : std::nullopt;
    const std::string field_kind = typed ? kind_of(*typed) : std::string();
    json value;
    if (field_type == json::value_t::string) {
      value = o.value;
    } else if (field_type) {
      auto parsed = as_json(o.value);
      if (!parsed) {
        return make_error("--set " + o.text + ": " + where + " is " + field_kind + "; '" + o.value +
                          "' is not JSON");
      }
      value = std::move(*parsed);
    } else {
      auto parsed = as_json(o.value);
      value = parsed ? std::move(*parsed) : json(o.value);
    }
    // Walk down, creating objects where nothing is yet.
    json* at = &doc;
    for (std::size_t k = 0; k < o.path.size(); ++k) {
      const auto& seg = o.path[k];
      const bool last = k + 1 == o.path.size();
      if (at->is_null()) *at = json::object();
      if (at->is_object()) {
        if (!last && !at->contains(seg)) {
          // A section the document leaves out starts as the spec's defaults, so setting one
          // field of it (`training.optimizer.learning_rate`) keeps the others (its `type`).
          const std::vector<std::string> prefix(o.path.begin(), o.path.begin() + k + 1);
          if (const json* d = normalised.is_null() ? nullptr : find(normalised, prefix);
              d && d->is_object()) {
            (*at)[seg] = *d;
          }
        }
        at = &(*at)[seg];
      } else if (at->is_array()) {
        const auto i = index_of(seg);
        if (!i || *i >= at->size()) {
          return make_error("--set " + o.text + ": " +
                            dotted({o.path.begin(), o.path.begin() + k}) + " is an array of " +
                            std::to_string(at->size()) + "; '" + seg + "' is not an index in it");
        }
        at = &(*at)[*i];
      } else {
        return make_error("--set " + o.text + ": " + dotted({o.path.begin(), o.path.begin() + k}) +
                          " is " + kind_of(*at) + ", not an object");
      }
      if (last) *at = value;
    }
  }
  return doc;
}

result<job_spec> load_job_spec(os::env& e, const std::filesystem::path& file,
                               const std::vector<job_override>& sets) {
  if (sets.empty()) return load_job_spec(e, file);
  return load_document(
      e, file, "job file",
      [&](std::string_view text, const std::filesystem::path& base) -> result<job_spec> {
        // Malformed JSON: the plain parse says where, as without overrides.
        auto doc = as_json(std::string(text));
        if (!doc) return parse_job_spec(text, base);
        auto changed = apply_overrides(std::move(*doc), sets);
        if (!changed) return changed.error();
        return parse_job_spec(changed->dump(), base);
      });
}

}  // namespace baton::protocol
