#include "protocol/field_checker.h"

#include <algorithm>
#include <limits>

namespace baton::protocol {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string_view> closest(std::string_view word,
                                        std::span<const std::string_view> options) {
  std::optional<std::string_view> best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto option : options) {
    const std::size_t distance = edit_distance(word, option);
    if (distance < best_distance) {
      best_distance = distance;
      best = option;
    }
  }
  if (!best) return std::nullopt;
  // A third of the word may be wrong, at least two edits, but never the whole word: "ab" is not
  // a typo of "xy".
  const std::size_t allowed = std::max<std::size_t>(2, best->size() / 3);
  if (best_distance > allowed || best_distance >= best->size()) return std::nullopt;
  return best;
}

std::string one_of(std::span<const std::string_view> options) {
  std::string out;
  for (const auto option : options) {
    if (!out.empty()) out += ", ";
    out += option;
  }
  return out;
}

std::string suggestion(std::string_view word, std::span<const std::string_view> options) {
  if (auto best = closest(word, options)) return "did you mean \"" + std::string(*best) + "\"?";
  return "expected one of " + one_of(options);
}

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string describe(const nlohmann::json& v) {
  using json = nlohmann::json;
  switch (v.type()) {
    case json::value_t::object:
      return v.empty() ? "{}" : "an object";
    case json::value_t::array:
      return v.empty() ? "[]" : "an array";
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      if (s.size() > 64) {
        // Cut on a UTF-8 boundary: half a character makes dump() throw (type_error 316).
        std::size_t cut = 61;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        return json(s.substr(0, cut) + "...").dump();
      }
      return v.dump();
    }
    default:
      return v.dump();
  }
}

std::vector<std::string> unknown_keys(const nlohmann::json& j,
                                      std::span<const std::string_view> keys) {
  std::vector<std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) out.push_back(key);
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& lines, std::string_view prefix) {
  std::string out;
  for (const auto& line : lines) {
    if (!out.empty()) out += '\n';
    out += prefix;
    out += line;
  }
  return out;
}

}  // namespace baton::protocol
