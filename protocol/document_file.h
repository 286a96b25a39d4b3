// Loading a JSON document from a file the way every baton config is loaded: the path made
// absolute (relative paths inside resolve against the file's folder, whatever the caller's
// working directory), read through the env, parsed, and every error line prefixed with the
// file name, compiler style. Job files and daemon settings share it.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"
#include "os/env.h"

namespace baton::protocol {

// `parse(text, base_dir)` returns a result<T>; `what` names the file kind in read errors.
template <class Parse>
auto load_document(os::env& e, const std::filesystem::path& file, const std::string& what,
                   Parse&& parse) -> decltype(parse(std::string_view{}, file)) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(file, ec);
  const std::filesystem::path& where = ec ? file : absolute;
  auto text = e.read_file(where);
  if (!text) return with_context("cannot read " + what, text.error());
  auto parsed = parse(std::string_view(*text), where.parent_path());
  if (!parsed) return prefix_lines(file.string() + ": ", parsed.error());
  return parsed;
}

}  // namespace baton::protocol
