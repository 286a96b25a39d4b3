// The field checker: the pieces every typed walk over a user's JSON document shares (job specs,
// daemon settings). Unknown keys are reported with a did-you-mean suggestion, and a wrong value
// is described in a few characters, so one message line per problem stays readable. Before this
// file the job spec and the daemon settings each had a copy, and the copies drifted (one cut a
// quoted value inside a UTF-8 character, which makes nlohmann's dump() throw).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton::protocol {

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, the most common
// typo ("trainig" is one edit from "training").
std::size_t edit_distance(std::string_view a, std::string_view b);

// The closest option if it is close enough to be a plausible typo.
std::optional<std::string_view> closest(std::string_view word,
                                        std::span<const std::string_view> options);

// "a, b, c": the options in their order.
std::string one_of(std::span<const std::string_view> options);

// "did you mean \"x\"?" when one option is close, else "expected one of a, b, c".
std::string suggestion(std::string_view word, std::span<const std::string_view> options);

// "parent.key", or "key" at the top level.
std::string child_path(const std::string& parent, std::string_view key);
// "parent[3]".
std::string index_path(const std::string& parent, std::size_t index);

// How a wrong value is shown after "got": short and unambiguous, never the whole subtree. A
// string over 64 bytes is cut to at most 61 bytes on a UTF-8 character boundary, then "...".
std::string describe(const nlohmann::json& v);

// The keys of object `j` that are not in `keys`, in the object's order.
std::vector<std::string> unknown_keys(const nlohmann::json& j,
                                      std::span<const std::string_view> keys);

// The problems of one document, one a line, each after `prefix` (a file name, say).
std::string join_lines(const std::vector<std::string>& lines, std::string_view prefix = "");

}  // namespace baton::protocol
