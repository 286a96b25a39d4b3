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
