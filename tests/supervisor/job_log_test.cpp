#include "supervisor/job_log.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "os/mem_env.h"

using namespace baton::supervisor;
namespace fs = std::filesystem;

TEST_CASE("log chunks are bounded and never split a UTF-8 character", "[unit][job_log]") {
  baton::os::mem_env files;
  REQUIRE(files.create_dirs("/logs"));
  const fs::path file = "/logs/worker.log";
  std::string text(10, 'a');
  text += "\xc3\xa9";  // é at bytes 10-11
  text += "tail";
  REQUIRE(files.put(file, text));
  auto c = read_log_chunk(files, file, 0, 11);  // would end inside é
  REQUIRE(c);
  CHECK(c->data == std::string(10, 'a'));
  CHECK(c->next_offset == 10);
  CHECK(c->size == text.size());
  c = read_log_chunk(files, file, 10, 100);
  REQUIRE(c);
  CHECK(c->data == "\xc3\xa9tail");
  CHECK(c->next_offset == text.size());
  c = read_log_chunk(files, file, 1000, 100);  // past the end: nothing, same offset
  REQUIRE(c);
  CHECK(c->data.empty());
  CHECK(c->next_offset == 1000);
  c = read_log_chunk(files, "/logs/missing.log", 0);
  REQUIRE(c);
  CHECK(c->size == 0);

  REQUIRE(files.put(file, std::string(200 * 1024, 'x')));
  c = read_log_chunk(files, file, 0);
  REQUIRE(c);
  CHECK(c->data.size() == max_log_chunk_bytes);
}

TEST_CASE("stamps are stripped at line starts only, however the text is cut", "[unit][job_log]") {
  const std::string stamp = log_stamp(1796153557123);
  const std::string text = stamp + "first\n" + "old line without a stamp\n" + stamp + "ends " +
                           stamp + "inside\n\n" + stamp + "\n" + "short\n" + stamp + "unfinished";
  const std::string want =
      "first\nold line without a stamp\nends " + stamp + "inside\n\n\nshort\nunfinished";
  for (std::size_t piece : {1, 2, 7, 25, 26, 1000}) {
    log_stamp_stripper s;
    std::string out;
    for (std::size_t at = 0; at < text.size(); at += piece) out += s.feed(text.substr(at, piece));
    out += s.finish();
    CHECK(out == want);
  }
  log_stamp_stripper s;
  CHECK(s.feed("2026-12") == "");  // may still become a stamp
  CHECK(s.finish() == "2026-12");  // never did
}

TEST_CASE("the log's generations read as one stream", "[unit][job_log]") {
  baton::os::mem_env files;
  REQUIRE(files.create_dirs("/logs"));
  const fs::path file = "/logs/worker.log";
  REQUIRE(files.put(log_generation(file, 2), "aaaa\n"));  // stream offsets 100-104
  REQUIRE(files.put(log_generation(file, 1), "bb\n"));    // 105-107
  REQUIRE(files.put(file, "cccccc\n"));                   // 108-114
  REQUIRE(files.put(log_start_file(file), "108"));
  auto c = read_log_chunk(files, file, 0);
  REQUIRE(c);
  CHECK(c->start == 100);
  CHECK(c->size == 115);
  CHECK(c->skipped == 100);
  CHECK(c->data == "aaaa\n");  // one generation at a time
  CHECK(c->next_offset == 105);
  c = read_log_chunk(files, file, 105);
  REQUIRE(c);
  CHECK(c->skipped == 0);
  CHECK(c->data == "bb\n");
  c = read_log_chunk(files, file, 110, 3);
  REQUIRE(c);
  CHECK(c->data == "ccc");
  CHECK(c->next_offset == 113);
  c = read_log_chunk(files, file, 115);
  REQUIRE(c);
  CHECK(c->data.empty());
  CHECK(c->next_offset == 115);
  // Just rotated: the newest generation does not exist yet, the stream still ends at its start.
  REQUIRE(files.remove_file(file));
  REQUIRE(files.put(log_start_file(file), "115"));
  REQUIRE(files.rename_file(log_generation(file, 1), log_generation(file, 3)));
  c = read_log_chunk(files, file, 0);
  REQUIRE(c);
  CHECK(c->size == 115);
}
