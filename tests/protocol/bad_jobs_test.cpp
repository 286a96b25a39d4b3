// The bad-input matrix for job files, with `baton validate` semantics (load_job_spec, then
// check_job_files). Each tests/data/bad_jobs/NN-name.json has the exact error text it must give in
// NN-name.expected, where `{dir}/a/b.json` stands for that file in the absolute folder of the data
// files and `{root}/a/b` for /a/b on that folder's drive, spelled as the platform spells them.
// Inputs too big or too deep to commit are generated here into a os::mem_env. To add a case: write
// the .json, run this test with BATON_WRITE_EXPECTED=1 to create its missing .expected, then read
// that file and only commit it if every line is the message a user should get.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "os/env.h"
#include "os/mem_env.h"
#include "protocol/job_spec.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using namespace baton::protocol;

namespace {

// Absolute and normal, as the product prints it (on Windows BATON_SOURCE_DIR has no drive).
const fs::path data_dir =
    fs::absolute(fs::path(BATON_SOURCE_DIR) / "tests" / "data" / "bad_jobs").lexically_normal();
// Where the generated documents live in the os::mem_env.
const fs::path gen_dir = baton::test::abs_path("/gen");

std::string prefix_lines(const std::string& prefix, const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) out += (out.empty() ? "" : "\n") + prefix + line;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

// What `baton validate FILE` prints on stderr, without the final newline; "<valid>" if it passes.
std::string validate(baton::os::env& e, const fs::path& file) {
  auto spec = load_job_spec(e, file);
  if (!spec) return spec.error().message;
  if (auto files = check_job_files(e, *spec); !files) {
    return prefix_lines(file.string() + ": ", files.error().message);
  }
  return "<valid>";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// Each `{dir}/rel/path` (up to a space, ':' or line end) becomes data_dir / rel/path, and each
// `{root}/abs/path` the same path under the root of data_dir's drive: a path that starts with '/'
// is absolute on POSIX but only drive-relative on Windows, so it lands on the job file's drive.
std::string expand_paths(const std::string& text) {
  const std::pair<std::string, fs::path> tokens[] = {{"{dir}/", data_dir},
                                                     {"{root}/", data_dir.root_path()}};
  std::string out;
  std::size_t at = 0;
  while (true) {
    std::size_t hit = std::string::npos;
    const std::pair<std::string, fs::path>* token = nullptr;
    for (const auto& t : tokens) {
      const auto h = text.find(t.first, at);
      if (h < hit) {
        hit = h;
        token = &t;
      }
    }
    if (token == nullptr) break;
    out += text.substr(at, hit - at);
    const auto rel_start = hit + token->first.size();
    const auto rel_end = std::min(text.find_first_of(" :\n", rel_start), text.size());
    out +=
        (token->second / text.substr(rel_start, rel_end - rel_start)).lexically_normal().string();
    at = rel_end;
  }
  return out + text.substr(at);
}

// The inverse for {dir}, for writing a new .expected file ({root} is written by hand): separators
// inside each path token become '/'.
std::string to_placeholders(const std::string& actual) {
  std::string out = replace_all(actual, data_dir.string(), "{dir}");
  for (auto hit = out.find("{dir}"); hit != std::string::npos; hit = out.find("{dir}", hit + 1)) {
    const auto end = std::min(out.find_first_of(" :\n", hit), out.size());
    std::replace(out.begin() + static_cast<std::ptrdiff_t>(hit),
                 out.begin() + static_cast<std::ptrdiff_t>(end),
                 static_cast<char>(fs::path::preferred_separator), '/');
  }
  return out;
}

std::string strip_final_newline(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// A job with every field valid except what `inner` adds, one line, for generated documents.
std::string job_with(const std::string& extra) {
  return R"({"name":"gen","data":{"type":"synthetic","samples":10,"features":2},)"
         R"("model":{"layers":[{"units":1,"activation":"sigmoid"}]})" +
         extra + "}";
}

std::string validate_text(const std::string& name, const std::string& text) {
  baton::os::mem_env e;
  REQUIRE(e.create_dirs(gen_dir));
  REQUIRE(e.put(gen_dir / name, text));
  return validate(e, gen_dir / name);
}

// The file name the messages of a generated document start with.
std::string gen_file(const std::string& name) { return (gen_dir / name).string(); }

}  // namespace

TEST_CASE("every bad job file gives its exact expected error", "[unit]") {
  std::vector<fs::path> jobs;
  for (const auto& entry : fs::directory_iterator(data_dir)) {
    if (entry.path().extension() == ".json") jobs.push_back(entry.path());
  }
  std::sort(jobs.begin(), jobs.end());
  REQUIRE(jobs.size() >= 40);

  const bool write_missing = std::getenv("BATON_WRITE_EXPECTED") != nullptr;
  for (const auto& job : jobs) {
    const fs::path expected_file = fs::path(job).replace_extension(".expected");
    const std::string actual = validate(baton::os::env::default_env(), job);
    INFO(job.filename().string());
    CHECK(actual != "<valid>");
    if (!fs::exists(expected_file)) {
      if (write_missing) {
        std::ofstream(expected_file, std::ios::binary) << to_placeholders(actual) << '\n';
      }
      FAIL_CHECK("missing " << expected_file.filename().string() << "; actual error:\n" << actual);
      continue;
    }
    const std::string expected = expand_paths(strip_final_newline(read(expected_file)));
    CHECK(actual == expected);
  }
}

TEST_CASE("every expected-error file has its job file", "[unit]") {
  for (const auto& entry : fs::directory_iterator(data_dir)) {
    if (entry.path().extension() != ".expected") continue;
    INFO(entry.path().filename().string());
    CHECK(fs::exists(fs::path(entry.path()).replace_extension(".json")));
  }
}

TEST_CASE("generated bad jobs: size limit", "[unit]") {
  // Padding with whitespace keeps the document valid, so only the size decides.
  const std::string valid = job_with("");
  const std::string at_limit = valid + std::string(max_job_document_bytes - valid.size(), ' ');
  CHECK(validate_text("at-limit.json", at_limit) == "<valid>");
  CHECK(validate_text("over-limit.json", at_limit + " ") ==
        gen_file("over-limit.json") +
            ": document is 1048577 bytes; a job document may be at most 1048576 "
            "bytes (1 MiB)");
  // Far over the limit: rejected up front, not parsed.
  CHECK(validate_text("huge.json", std::string(8 << 20, '[')) ==
        gen_file("huge.json") +
            ": document is 8388608 bytes; a job document may be at most 1048576 bytes "
            "(1 MiB)");
}

TEST_CASE("generated bad jobs: nesting depth", "[unit]") {
  const auto nested = [](int arrays) {
    return job_with(R"(,"debug":{"deep":)" + std::string(arrays, '[') + std::string(arrays, ']') +
                    "}");
  };
  // The root and "debug" are two levels; 62 arrays make 64, the limit, so only the key is wrong.
  CHECK(validate_text("deep-ok.json", nested(62)) ==
        gen_file("deep-ok.json") +
            ": debug.deep: unknown key; expected one of leak_mib_per_step, "
            "crash_at_step, hang_at_step");
  const std::string prefix = job_with("");
  const auto first_bracket = prefix.size() - 1 + std::string(R"(,"debug":{"deep":)").size();
  const auto overflow = first_bracket + 62;  // 0-based byte of the 65th opening bracket
  CHECK(validate_text("deep.json", nested(63)) ==
        gen_file("deep.json") + ": document nests deeper than 64 levels at line 1, column " +
            std::to_string(overflow + 1) + " (byte " + std::to_string(overflow) + ")");
  // A hostile depth far past any stack: the SAX pass stops at the limit.
  CHECK(validate_text("very-deep.json", std::string(500000, '[')) ==
        gen_file("very-deep.json") +
            ": document nests deeper than 64 levels at line 1, column 65 (byte 64)");
  // Brackets inside strings are text, not nesting.
  CHECK(validate_text("brackets-in-string.json",
                      job_with(R"(,"worker":{"command":[")" + std::string(1000, '[') + "\"]}")) ==
        "<valid>");
}

TEST_CASE("a UTF-8 byte order mark is accepted, as Windows editors write one", "[unit]") {
  CHECK(validate_text("bom.json", "\xef\xbb\xbf" + job_with("")) == "<valid>");
}
