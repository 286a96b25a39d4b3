#include "supervisor/job_log_writer.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "os/mem_env.h"
#include "supervisor/job_log.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

namespace {

const fs::path log_file = "/jobs/j1/worker.log";

struct fixture {
  baton::os::mem_env files;
  std::int64_t now = 1796153557123;  // 2026-12-01T19:32:37.123Z
  fixture() { REQUIRE(files.create_dirs(log_file.parent_path())); }
  job_log_writer writer(log_limits limits = {}) {
    return job_log_writer(files, log_file, limits, [this] { return now; });
  }
  std::string content(const fs::path& p = log_file) {
    auto t = files.read_file(p);
    return t ? *t : std::string();
  }
};

// Built by appends: GCC 12 at -O3 gives a false -Wrestrict on "literal" + std::string.
std::string cat(std::string_view a, std::string_view b) {
  std::string out(a);
  out += b;
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Everything from `offset` to the end of the stream, as `baton logs -f` reads it.
std::string read_all(baton::os::env& e, std::uint64_t& offset, std::uint64_t* skipped = nullptr) {
  std::string text;
  for (;;) {
    auto c = read_log_chunk(e, log_file, offset, 100);
    REQUIRE(c);
    if (skipped) *skipped += c->skipped;
    text += c->data;
    const bool advanced = c->next_offset > offset;
    offset = c->next_offset;
    if (!advanced || offset >= c->size) return text;
  }
}

}  // namespace

TEST_CASE("every line is stored with its time in front", "[unit][job_log_writer]") {
  fixture f;
  auto w = f.writer();
  REQUIRE(w.add_line("[baton] worker 12 started at step 0"));
  f.now += 1001;
  REQUIRE(w.add_line(""));
  CHECK(f.content() ==
        "2026-12-01T19:32:37.123Z [baton] worker 12 started at step 0\n"
        "2026-12-01T19:32:38.124Z \n");
  CHECK(log_stamp(951782400500) == "2000-02-29T00:00:00.500Z ");
  CHECK(log_stamp(0) == "1970-01-01T00:00:00.000Z ");
  CHECK(log_stamp(0).size() == log_stamp_bytes);
  CHECK(starts_with_log_stamp("2026-12-01T19:32:37.123Z hello"));
  CHECK_FALSE(starts_with_log_stamp("2026-12-01T19:32:37.123Zhello"));
  CHECK_FALSE(starts_with_log_stamp("Traceback (most recent call last):"));
}

TEST_CASE("stderr cut anywhere is stored as whole lines, the unfinished one held",
          "[unit][job_log_writer]") {
  fixture f;
  auto w = f.writer();
  REQUIRE(w.add_stream("Trace"));
  CHECK(f.content().empty());  // nothing whole yet
  REQUIRE(w.add_stream("back\n  File \"x.py\"\n\nValue"));
  REQUIRE(w.add_line("[baton] an event between"));
  REQUIRE(w.add_stream("Error: bad"));
  REQUIRE(w.end_stream());
  REQUIRE(w.end_stream());  // nothing held: nothing more
  const std::string s = "2026-12-01T19:32:37.123Z ";
  CHECK(f.content() == s + "Traceback\n" + s + "  File \"x.py\"\n" + s + "\n" + s +
                           "[baton] an event between\n" + s + "ValueError: bad\n");
}

TEST_CASE("a line longer than the bound is cut with a marker, the rest of it dropped",
          "[unit][job_log_writer]") {
  fixture f;
  log_limits limits;
  limits.max_line_bytes = 10;
  auto w = f.writer(limits);
  REQUIRE(w.add_stream("abcdef"));
  REQUIRE(w.add_stream("ghijklmnop"));  // passes 10 bytes here: stored at once
  CHECK(lines_of(f.content()).size() == 1);
  REQUIRE(w.add_stream(std::string(100000, 'z')));  // still the same line: dropped
  REQUIRE(w.add_stream("zz\nnext\n"));
  REQUIRE(w.add_line(std::string(25, 'q')));
  // A cut never ends inside a UTF-8 character: "12345678é" is 10 bytes, "123456789é" is 11.
  REQUIRE(w.add_stream("123456789\xc3\xa9\n"));
  const auto lines = lines_of(f.content());
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].substr(log_stamp_bytes) == cat("abcdefghij", cut_marker(10)));
  CHECK(lines[1].substr(log_stamp_bytes) == "next");
  CHECK(lines[2].substr(log_stamp_bytes) == std::string(10, 'q') + cut_marker(10));
  CHECK(lines[3].substr(log_stamp_bytes) == cat("123456789", cut_marker(10)));
}

TEST_CASE("the log rotates before it passes max_bytes and keeps `keep` generations",
          "[unit][job_log_writer]") {
  fixture f;
  log_limits limits;
  limits.max_bytes = 200;
  limits.keep = 2;
  auto w = f.writer(limits);
  std::uint64_t written = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string line = cat("line ", std::to_string(i));
    REQUIRE(w.add_stream(line + "\n"));
    written += log_stamp_bytes + line.size() + 1;
  }
  CHECK(f.files.file_exists(log_file));
  CHECK(f.files.file_exists(log_generation(log_file, 1)));
  CHECK(f.files.file_exists(log_generation(log_file, 2)));
  CHECK_FALSE(f.files.file_exists(log_generation(log_file, 3)));
  std::uint64_t on_disk = 0;
  for (int k = 0; k <= 2; ++k) {
    const auto text = f.content(log_generation(log_file, k));
    CHECK(text.size() <= limits.max_bytes);
    CHECK(text.back() == '\n');  // generations are whole lines
    on_disk += text.size();
  }
  CHECK(on_disk <= (limits.keep + 1) * limits.max_bytes);
  // The stream's end is everything ever written; its start is what rotation dropped.
  auto c = read_log_chunk(f.files, log_file, 0, 100);
  REQUIRE(c);
  CHECK(c->size == written);
  CHECK(c->start == written - on_disk);
  CHECK(c->skipped == c->start);
  CHECK(c->offset == c->start);
  // Read from the oldest kept byte on: whole lines, in order, none missing, up to line 99.
  std::uint64_t offset = c->start;
  const auto lines = lines_of(read_all(f.files, offset));
  REQUIRE(!lines.empty());
  CHECK(offset == written);
  const int first = std::stoi(lines.front().substr(log_stamp_bytes + 5));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i].substr(log_stamp_bytes) == cat("line ", std::to_string(first + i)));
  }
  CHECK(first + lines.size() == 100);

  SECTION("a smaller keep later removes the older generations at the next rotation") {
    limits.keep = 1;
    auto w1 = f.writer(limits);
    for (int i = 0; i < 10; ++i) REQUIRE(w1.add_line(cat("again ", std::to_string(i))));
    CHECK(f.files.file_exists(log_generation(log_file, 1)));
    CHECK_FALSE(f.files.file_exists(log_generation(log_file, 2)));
  }
}

TEST_CASE("a follower reading across rotations sees every line once", "[unit][job_log_writer]") {
  fixture f;
  log_limits limits;
  limits.max_bytes = 150;
  limits.keep = 1;
  auto w = f.writer(limits);
  std::uint64_t offset = 0;
  std::uint64_t skipped = 0;
  std::string seen;
  std::string expected;
  for (int i = 0; i < 60; ++i) {
    const std::string line = cat("step ", std::to_string(i));
    if (i % 3 == 0) {
      REQUIRE(w.add_line(line));
    } else {
      REQUIRE(w.add_stream(line.substr(0, 3)));
      REQUIRE(w.add_stream(line.substr(3) + "\n"));
    }
    expected += log_stamp(f.now) + line + "\n";
    if (i % 2 == 1) seen += read_all(f.files, offset, &skipped);  // every other write
  }
  seen += read_all(f.files, offset, &skipped);
  CHECK(skipped == 0);
  CHECK(seen == expected);
}

TEST_CASE("a follower that fell behind past the kept generations is told what it lost",
          "[unit][job_log_writer]") {
  fixture f;
  log_limits limits;
  limits.max_bytes = 100;
  limits.keep = 1;
  auto w = f.writer(limits);
  for (int i = 0; i < 20; ++i) REQUIRE(w.add_line(cat("x", std::to_string(i))));
  std::uint64_t offset = 10;
  std::uint64_t skipped = 0;
  const auto text = read_all(f.files, offset, &skipped);
  auto c = read_log_chunk(f.files, log_file, 0, 0);
  REQUIRE(c);
  CHECK(skipped == c->start - 10);
  CHECK(text.size() == c->size - c->start);
  CHECK(starts_with_log_stamp(text));  // the oldest kept byte starts a line
}
