#include "protocol/checkpoint_store.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <span>
#include <thread>

#include "os/fault_env.h"
#include "os/mem_env.h"

using namespace baton::protocol;
namespace fs = std::filesystem;

namespace {

checkpoint at_step(std::int64_t step, float value = 1.0f) {
  checkpoint c;
  c.metadata = {{"step", std::to_string(step)}, {"job", "j"}};
  tensor t;
  t.name = "w";
  t.type = dtype::f32;
  t.shape = {4};
  const float v[4] = {value, value + 1, value + 2, value + 3};
  t.bytes.assign(reinterpret_cast<const char*>(v), sizeof v);
  c.tensors.push_back(std::move(t));
  return c;
}

std::vector<std::string> names(baton::os::env& e, const fs::path& dir) {
  auto n = e.list_dir(dir);
  REQUIRE(n);
  return *n;
}

const fs::path dir = "/jobs/a/checkpoints";

// A save's hash beside its writes, on a thread of its own (as the worker's team runs it).
void hash_beside(checkpoint_store& s) {
  s.set_side_by_side([](const std::function<void()>& a, const std::function<void()>& b) {
    std::thread second(b);
    a();
    second.join();
  });
}

}  // namespace

TEST_CASE("checkpoint store names files by zero-padded step", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  CHECK(s.path_for_step(1234) == dir / "ckpt-000000001234.safetensors");
  auto p = s.save(at_step(1234));
  REQUIRE(p);
  CHECK(p->path == dir / "ckpt-000000001234.safetensors");
  CHECK(names(e, dir) == std::vector<std::string>{"ckpt-000000001234.safetensors"});
}

TEST_CASE("checkpoint store keeps the newest K", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  for (int step : {10, 20, 30, 40, 50}) REQUIRE(s.save(at_step(step)));
  auto l = s.list();
  REQUIRE(l);
  CHECK(*l == std::vector<fs::path>{s.path_for_step(30), s.path_for_step(40), s.path_for_step(50)});
  auto newest = s.load_newest();
  REQUIRE(newest);
  REQUIRE(newest->has_value());
  CHECK((*newest)->path == s.path_for_step(50));
  CHECK((*newest)->data.step() == 50);
  CHECK((*newest)->rejected.empty());
}

TEST_CASE("checkpoint store orders by step, not by name", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 5);
  REQUIRE(s.save(at_step(999999999999)));
  REQUIRE(s.save(at_step(1000000000000)));  // 13 digits
  auto newest = s.load_newest();
  REQUIRE(newest);
  CHECK((*newest)->data.step() == 1000000000000);
}

TEST_CASE("checkpoint store never prunes the file just written", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 2);
  for (int step : {10, 11, 12}) REQUIRE(s.save(at_step(step)));
  REQUIRE(s.save(at_step(5)));  // a rewound job: older step, but it is the latest write
  auto l = s.list();
  REQUIRE(l);
  CHECK(*l == std::vector<fs::path>{s.path_for_step(5), s.path_for_step(12)});

  checkpoint_store one(e, "/jobs/b", 0);  // keep < 1 still keeps the one just written
  REQUIRE(one.save(at_step(1)));
  REQUIRE(one.save(at_step(2)));
  CHECK(names(e, "/jobs/b") == std::vector<std::string>{".spare", "ckpt-000000000002.safetensors"});
}

TEST_CASE("checkpoint store replaces the same step", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  REQUIRE(s.save(at_step(7, 1.0f)));
  REQUIRE(s.save(at_step(7, 100.0f)));
  CHECK(names(e, dir) == std::vector<std::string>{"ckpt-000000000007.safetensors"});
  auto newest = s.load_newest();
  REQUIRE(newest);
  CHECK((*newest)->data.find("w")->data_as<float>()[0] == 100.0f);
}

TEST_CASE("checkpoint store with no files loads nothing", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store missing(e, "/no/such/dir", 3);
  auto r = missing.load_newest();
  REQUIRE(r);
  CHECK_FALSE(r->has_value());
  REQUIRE(e.create_dirs(dir));
  REQUIRE(e.put(dir / "notes.txt", "not a checkpoint"));
  checkpoint_store s(e, dir, 3);
  auto r2 = s.load_newest();
  REQUIRE(r2);
  CHECK_FALSE(r2->has_value());
}

TEST_CASE("checkpoint store falls back past a corrupt newest file", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  REQUIRE(s.save(at_step(1)));
  REQUIRE(s.save(at_step(2)));
  REQUIRE(s.save(at_step(3)));
  auto bytes = e.read_file(s.path_for_step(3));
  REQUIRE(bytes);
  std::string bad = *bytes;
  bad[bad.size() - 3] ^= 0x10;
  REQUIRE(e.put(s.path_for_step(3), bad));
  REQUIRE(e.put(s.path_for_step(2), bytes->substr(0, 40)));  // truncated too

  auto r = s.load_newest();
  REQUIRE(r);
  REQUIRE(r->has_value());
  CHECK((*r)->data.step() == 1);
  REQUIRE((*r)->rejected.size() == 2);
  CHECK_THAT((*r)->rejected[0], Catch::StartsWith(s.path_for_step(3).string() + ": ") &&
                                    Catch::Contains("digest mismatch"));
  CHECK_THAT((*r)->rejected[1], Catch::StartsWith(s.path_for_step(2).string() + ": "));
}

TEST_CASE("checkpoint store rejects a file whose name and step disagree",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  REQUIRE(s.save(at_step(1)));
  auto other = encode_checkpoint(at_step(9));
  REQUIRE(other);
  REQUIRE(e.put(s.path_for_step(4), *other));
  auto r = s.load_newest();
  REQUIRE(r);
  CHECK((*r)->data.step() == 1);
  REQUIRE((*r)->rejected.size() == 1);
  CHECK_THAT((*r)->rejected[0],
             Catch::Contains("file name says step 4 but its metadata says step 9"));
}

TEST_CASE("checkpoint store with only corrupt files lists every reason",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  REQUIRE(s.save(at_step(1)));
  REQUIRE(s.save(at_step(2)));
  REQUIRE(e.put(s.path_for_step(1), "garbage"));
  REQUIRE(e.put(s.path_for_step(2), std::string(64, '\0')));
  auto r = s.load_newest();
  REQUIRE_FALSE(r);
  const auto& m = r.error().message;
  CHECK_THAT(m, Catch::Contains("no valid checkpoint in " + dir.string() + " (2 files"));
  CHECK_THAT(m, Catch::Contains(s.path_for_step(1).string() + ": file is 7 bytes"));
  CHECK_THAT(m, Catch::Contains(s.path_for_step(2).string() + ": "));
}

TEST_CASE("checkpoint store save failures leave the previous file intact",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 3);
  const bool beside = GENERATE(false, true);
  INFO((beside ? "hashed beside the writes" : "hashed inline"));
  if (beside) hash_beside(s);
  REQUIRE(s.save(at_step(5)));
  const auto old_path = s.path_for_step(5);
  const auto before = mem.read_file(old_path);
  REQUIRE(before);

  const auto check_intact = [&] {
    auto now = mem.read_file(old_path);
    REQUIRE(now);
    CHECK(*now == *before);  // byte-identical
    CHECK(names(mem, dir) == std::vector<std::string>{old_path.filename().string()});  // no temps
    auto r = s.load_newest();
    REQUIRE(r);
    CHECK((*r)->data.step() == 5);
  };

  SECTION("a write that throws halfway") {
    e.throw_half_append_at(1);
    // Same step: the target file itself would be clobbered by a non-atomic write.
    auto r = s.save(at_step(5, 42.0f));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("threw after"));
    CHECK(e.faults_fired() == 1);
    check_intact();
  }
  SECTION("no space left on append") {
    e.fail_at(1, "No space left on device", false, baton::os::fault_env::op::append);
    auto r = s.save(at_step(6));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("No space left on device") &&
                                      Catch::Contains(s.path_for_step(6).string()));
    check_intact();
  }
  SECTION("the digest's patch fails") {
    // The header, the one tensor's piece, then the patch: the third write.
    e.fail_at(3, "No space left on device", false, baton::os::fault_env::op::append);
    auto r = s.save(at_step(6));
    REQUIRE_FALSE(r);
    CHECK(e.faults_fired() == 1);
    CHECK_THAT(r.error().message, Catch::Contains("No space left on device"));
    check_intact();
  }
  SECTION("fsync fails") {
    e.fail_at(1, "Input/output error", false, baton::os::fault_env::op::sync);
    auto r = s.save(at_step(5, 9.0f));
    REQUIRE_FALSE(r);  // a failed fsync is a failed save, never reported as durable
    CHECK_THAT(r.error().message,
               Catch::Contains("fsync") && Catch::Contains("Input/output error"));
    check_intact();
  }
  SECTION("rename fails") {
    e.fail_at(1, "Permission denied", false, baton::os::fault_env::op::rename_file);
    REQUIRE_FALSE(s.save(at_step(5, 3.0f)));
    check_intact();
  }
  SECTION("open fails") {
    e.fail_at(1, "Too many open files", false, baton::os::fault_env::op::new_writable_file);
    REQUIRE_FALSE(s.save(at_step(6)));
    check_intact();
  }
}

TEST_CASE("checkpoint store reports a failed folder sync and does not prune",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 1);
  REQUIRE(s.save(at_step(1)));
  e.fail_at(1, "Input/output error", false, baton::os::fault_env::op::sync_dir);
  auto r = s.save(at_step(2));
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("fsync folder"));
  // The rename happened, but the new file may not survive a power cut: the old one must stay.
  CHECK(mem.file_exists(s.path_for_step(1)));
}

TEST_CASE("checkpoint store reports a failed prune after a durable save",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 1);
  REQUIRE(s.save(at_step(1)));
  // Two to prune: the first becomes the spare, the second is removed, and that fails.
  REQUIRE(mem.put(dir / "ckpt-000000000000.safetensors", "old"));
  e.fail_at(1, "Permission denied", false, baton::os::fault_env::op::remove_file);
  auto r = s.save(at_step(2));
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith("saved " + s.path_for_step(2).string() + " but"));
  CHECK(r.error().code == baton::errc::saved_but_cleanup_failed);
  auto l = s.load_newest();
  REQUIRE(l);
  CHECK((*l)->data.step() == 2);
}

TEST_CASE("checkpoint store removes stale temp files of older steps only",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  REQUIRE(e.create_dirs(dir));
  REQUIRE(e.put(dir / "ckpt-000000000001.safetensors.tmp-0123-4", "half"));
  REQUIRE(e.put(dir / "ckpt-000000000009.safetensors.tmp-0123-5", "another writer"));
  REQUIRE(s.save(at_step(2)));
  CHECK(names(e, dir) == std::vector<std::string>{"ckpt-000000000002.safetensors",
                                                  "ckpt-000000000009.safetensors.tmp-0123-5"});
  auto l = s.list();  // temp files are never listed as checkpoints
  REQUIRE(l);
  CHECK(l->size() == 1);
}

TEST_CASE("checkpoint store rejects an invalid checkpoint before writing",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 3);
  checkpoint c = at_step(3);
  c.tensors[0].shape = {5};
  auto r = s.save(c);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("\"w\""));
  CHECK_FALSE(e.file_exists(dir / "ckpt-000000000003.safetensors"));
}

TEST_CASE("checkpoint store works on the real file system", "[unit][checkpoint_store]") {
  auto& e = baton::os::env::default_env();
  const auto root = fs::temp_directory_path() / "baton-ckpt-store-test";
  fs::remove_all(root);
  checkpoint_store s(e, root / "ckpts", 2);
  for (int step : {1, 2, 3}) REQUIRE(s.save(at_step(step)));
  CHECK(names(e, root / "ckpts") == std::vector<std::string>{".spare",
                                                             "ckpt-000000000002.safetensors",
                                                             "ckpt-000000000003.safetensors"});
  auto r = s.load_newest();
  REQUIRE(r);
  CHECK((*r)->data.step() == 3);
  fs::remove_all(root);
}

TEST_CASE("checkpoint store writes each save over the spare a prune left, at any size",
          "[unit][checkpoint_store]") {
  auto& e = baton::os::env::default_env();
  const auto root = fs::temp_directory_path() / "baton-ckpt-store-spare-test";
  fs::remove_all(root);
  checkpoint_store s(e, root, 2);
  // Big ones first, so the spare is longer than what is written over it next.
  const auto sized = [](int step, int floats) {
    checkpoint c = at_step(step);
    c.tensors[0].shape = {floats};
    c.tensors[0].bytes.assign(static_cast<std::size_t>(floats) * 4, '\x01');
    return c;
  };
  for (int step : {1, 2, 3}) REQUIRE(s.save(sized(step, 4096)));
  REQUIRE(fs::exists(s.spare_path()));  // what was step 1
#ifndef _WIN32
  struct stat spare {};
  REQUIRE(::stat(s.spare_path().c_str(), &spare) == 0);
#endif
  auto saved = s.save(at_step(4));  // four floats over a 16 KiB spare
  REQUIRE(saved);
#ifndef _WIN32
  // The very file, written over (Windows makes a new one: its env does not reuse).
  struct stat now {};
  REQUIRE(::stat(saved->path.c_str(), &now) == 0);
  CHECK(now.st_ino == spare.st_ino);
#endif
  CHECK(fs::file_size(saved->path) < 1024);
  auto read_back = s.verify(saved->path);
  REQUIRE(read_back);
  CHECK(*read_back == saved->digest);
  // Step 2 became the next spare; the checkpoints are the newest two, as without one.
  CHECK(names(e, root) == std::vector<std::string>{".spare", "ckpt-000000000003.safetensors",
                                                   "ckpt-000000000004.safetensors"});
  auto newest = s.load_newest();
  REQUIRE(newest);
  CHECK((*newest)->data.step() == 4);
  CHECK((*newest)->rejected.empty());
  fs::remove_all(root);
}

TEST_CASE("checkpoint store saves a view with the same bytes as the owned checkpoint",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  checkpoint_store s(mem, dir, 3);
  const checkpoint c = at_step(9, 3.0f);
  auto p = s.save(view_of(c));
  REQUIRE(p);
  auto bytes = mem.read_file(p->path);
  REQUIRE(bytes);
  auto expected = encode_checkpoint(c);
  REQUIRE(expected);
  CHECK(*bytes == *expected);
  auto digest = s.verify(p->path);
  REQUIRE(digest);
  CHECK(*digest == *checkpoint_digest(*bytes));
}

TEST_CASE("checkpoint store streaming save failing halfway leaves the old file intact",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 3);
  const bool beside = GENERATE(false, true);
  INFO((beside ? "hashed beside the writes" : "hashed inline"));
  if (beside) hash_beside(s);
  REQUIRE(s.save(at_step(5)));
  const auto old_path = s.path_for_step(5);
  const auto before = mem.read_file(old_path);
  REQUIRE(before);
  const checkpoint c = at_step(5, 42.0f);
  const auto appends_before = e.op_count(baton::os::fault_env::op::append);
  SECTION("an error on the tensor bytes, after the header went out") {
    e.fail_at(2, "No space left on device", false, baton::os::fault_env::op::append);
    auto r = s.save(view_of(c));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("No space left on device"));
  }
  SECTION("a throw halfway through the tensor bytes") {
    e.throw_half_append_at(2);
    auto r = s.save(view_of(c));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("threw after"));
  }
  CHECK(e.op_count(baton::os::fault_env::op::append) - appends_before == 2);  // header, then tensor
  auto now = mem.read_file(old_path);
  REQUIRE(now);
  CHECK(*now == *before);
  CHECK(names(mem, dir) == std::vector<std::string>{old_path.filename().string()});
  auto r = s.load_newest();
  REQUIRE(r);
  CHECK((*r)->data.step() == 5);
}

TEST_CASE("checkpoint store verify names the file and the damage", "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  checkpoint_store s(mem, dir, 3);
  auto p = s.save(at_step(3));
  REQUIRE(p);
  auto bytes = mem.read_file(p->path);
  REQUIRE(bytes);
  std::string bad = *bytes;
  bad.back() ^= 1;
  REQUIRE(mem.put(p->path, bad));
  auto r = s.verify(p->path);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message,
             Catch::Contains(p->path.string()) && Catch::Contains("digest mismatch"));
  CHECK_FALSE(s.verify(dir / "missing.safetensors"));
}

TEST_CASE("checkpoint store verify reads the real file system in chunks",
          "[unit][checkpoint_store]") {
  auto& e = baton::os::env::default_env();
  const auto d = fs::temp_directory_path() / "baton-ckpt-verify-test";
  fs::remove_all(d);
  checkpoint_store s(e, d, 2);
  // Bigger than one 1 MiB chunk, so the read-back takes several.
  checkpoint c = at_step(11);
  c.tensors[0].shape = {600000};
  c.tensors[0].bytes.assign(600000 * 4, '\x5a');
  auto p = s.save(view_of(c));
  REQUIRE(p);
  auto bytes = e.read_file(p->path);
  REQUIRE(bytes);
  auto digest = s.verify(p->path);
  REQUIRE(digest);
  CHECK(*digest == *checkpoint_digest(*bytes));
  fs::remove_all(d);
}

TEST_CASE("checkpoint store open_newest verifies in chunks and leaves the file open to read",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  checkpoint_store s(mem, dir, 3);
  CHECK_FALSE(*s.open_newest());  // nothing saved yet: nothing, and no error
  REQUIRE(s.save(at_step(4)));
  REQUIRE(s.save(at_step(8, 5.0f)));
  REQUIRE(s.save(at_step(12, 9.0f)));
  // The newest damaged in a tensor, the next one misnamed: both rejected, with their reasons.
  auto bytes = mem.read_file(s.path_for_step(12));
  REQUIRE(bytes);
  std::string bad = *bytes;
  bad.back() ^= 1;
  REQUIRE(mem.put(s.path_for_step(12), bad));
  REQUIRE(mem.rename_file(s.path_for_step(8), dir / "ckpt-000000000010.safetensors"));
  auto f = s.open_newest(3);
  REQUIRE(f);
  REQUIRE(*f);
  CHECK((*f)->path == s.path_for_step(4));
  CHECK((*f)->index.step() == 4);
  REQUIRE((*f)->rejected.size() == 2);
  CHECK_THAT((*f)->rejected[0], Catch::Contains("digest mismatch"));
  CHECK_THAT((*f)->rejected[1], Catch::Contains("file name says step 10"));
  const auto* w = (*f)->index.find("w");
  REQUIRE(w);
  std::string got(w->size, '\0');
  REQUIRE((*f)->file->read_into(w->offset, std::span<char>(got.data(), got.size())));
  CHECK(got == at_step(4).tensors[0].bytes);
  // Only damaged files: an error listing each.
  REQUIRE(mem.put(s.path_for_step(4), "not a checkpoint"));
  auto none = s.open_newest();
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("3 files, all rejected"));
}

TEST_CASE("checkpoint store open_newest can leave the digest to the read, and skip named files",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  checkpoint_store s(mem, dir, 3);
  REQUIRE(s.save(at_step(4)));
  REQUIRE(s.save(at_step(8, 5.0f)));
  auto bytes = mem.read_file(s.path_for_step(8));
  REQUIRE(bytes);
  std::string bad = *bytes;
  bad.back() ^= 1;
  REQUIRE(mem.put(s.path_for_step(8), bad));
  // Damaged data is not read here: the newest is opened, for the caller's read to refuse.
  auto f = s.open_newest(3, digest_check::on_read);
  REQUIRE(f);
  REQUIRE(*f);
  CHECK((*f)->path == s.path_for_step(8));
  CHECK((*f)->rejected.empty());
  CHECK_FALSE((*f)->index.digest_checked);
  std::string sink;
  const auto dest = [&](const tensor_extent& t) -> std::span<char> {
    sink.assign(t.size, '\0');
    return {sink.data(), sink.size()};
  };
  const auto read = [&](std::uint64_t offset, std::span<char> out) {
    return (*f)->file->read_into(offset, out);
  };
  auto r = read_checkpoint_tensors((*f)->index, read, dest, (*f)->path.string());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == baton::errc::corrupt_data);
  // Skipped by name: the next older one, and the skipped file is no rejection of open_newest's.
  auto older = s.open_newest(3, digest_check::on_read, {s.path_for_step(8)});
  REQUIRE(older);
  REQUIRE(*older);
  CHECK((*older)->path == s.path_for_step(4));
  CHECK((*older)->rejected.empty());
  // Everything skipped: an error, not "no checkpoint".
  auto none = s.open_newest(3, digest_check::on_read, {s.path_for_step(8), s.path_for_step(4)});
  CHECK_FALSE(none);
}

TEST_CASE("checkpoint store load_newest_file views the file it read", "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  checkpoint_store s(mem, dir, 3);
  REQUIRE(s.save(at_step(4)));
  REQUIRE(s.save(at_step(8, 5.0f)));
  auto newest = s.path_for_step(8);
  auto bytes = mem.read_file(newest);
  REQUIRE(bytes);
  std::string bad = *bytes;
  bad.back() ^= 1;
  REQUIRE(mem.put(newest, bad));  // falls back to step 4, as load_newest does
  auto f = s.load_newest_file();
  REQUIRE(f);
  REQUIRE(*f);
  CHECK((*f)->data.step() == 4);
  CHECK((*f)->rejected.size() == 1);
  const auto& w = (*f)->data.tensors.at(0);
  CHECK(w.bytes == at_step(4).tensors[0].bytes);
  CHECK(w.bytes.data() >= (*f)->bytes->data());
  CHECK(w.bytes.data() < (*f)->bytes->data() + (*f)->bytes->size());
  auto owned = s.load_newest();
  REQUIRE(owned);
  REQUIRE(*owned);
  CHECK((*owned)->path == (*f)->path);
  CHECK((*owned)->data.tensors.at(0).bytes == w.bytes);
  CHECK((*owned)->rejected == (*f)->rejected);
}

TEST_CASE("checkpoint store keeps failing, and keeps the old file, while the disk stays full",
          "[unit][checkpoint_store]") {
  using op = baton::os::fault_env::op;
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 2);
  REQUIRE(s.save(at_step(5)));
  const auto old_path = s.path_for_step(5);
  const auto before = mem.read_file(old_path);
  REQUIRE(before);

  struct fault_case {
    const char* message;
    op kind;
  };
  const fault_case c = GENERATE(fault_case{"No space left on device", op::append},
                                fault_case{"Input/output error", op::append},
                                fault_case{"No space left on device", op::sync},
                                fault_case{"Input/output error", op::sync});
  CAPTURE(c.message, baton::os::fault_env::to_string(c.kind));
  e.fail_at(1, c.message, true, c.kind);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = s.save(at_step(6 + attempt));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains(c.message));
    auto now = mem.read_file(old_path);
    REQUIRE(now);
    CHECK(*now == *before);
    CHECK(names(mem, dir) == std::vector<std::string>{old_path.filename().string()});
  }
  CHECK(e.faults_fired() == 3);
  // Space comes back: the next save lands and the older file is still the fallback.
  e.disarm();
  REQUIRE(s.save(at_step(9)));
  auto l = s.load_newest();
  REQUIRE(l);
  CHECK((*l)->data.step() == 9);
  CHECK(mem.file_exists(old_path));
}

TEST_CASE("checkpoint store redoes the whole write after a failed fsync",
          "[unit][checkpoint_store]") {
  using op = baton::os::fault_env::op;
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 2);
  REQUIRE(s.save(at_step(5)));
  e.fail_at(1, "Input/output error", false, op::sync);
  REQUIRE_FALSE(s.save(at_step(6, 7.0f)));
  // After fsync failed the kernel may have dropped the dirty pages (the fsyncgate lesson):
  // retrying fsync on the same file could report success for data that is gone. The second
  // attempt must open, write and sync a new file from scratch.
  const auto opens = e.op_count(op::new_writable_file);
  const auto appends = e.op_count(op::append);
  const auto syncs = e.op_count(op::sync);
  REQUIRE(s.save(at_step(6, 7.0f)));
  CHECK(e.op_count(op::new_writable_file) == opens + 1);
  CHECK(e.op_count(op::append) > appends);  // streamed: header and tensors, all written again
  CHECK(e.op_count(op::sync) == syncs + 1);
  auto bytes = mem.read_file(s.path_for_step(6));
  REQUIRE(bytes);
  auto expected = encode_checkpoint(at_step(6, 7.0f));
  REQUIRE(expected);
  CHECK(*bytes == *expected);
}

TEST_CASE("newest_verified moves rejected checkpoints aside with their reason",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 5);
  REQUIRE(s.save(at_step(4)));
  auto newest = s.save(at_step(8));
  REQUIRE(newest);
  auto bytes = e.read_file(newest->path);
  REQUIRE(bytes);
  (*bytes)[bytes->size() - 1] ^= 1;  // a flipped bit in a tensor
  REQUIRE(e.put(newest->path, *bytes));

  auto kept = s.newest_verified();  // by default nothing moves
  REQUIRE(kept);
  CHECK(kept->step == 4);
  CHECK(e.file_exists(newest->path));

  auto v = s.newest_verified({default_max_checkpoint_bytes, true});
  REQUIRE(v);
  CHECK(v->step == 4);
  REQUIRE(v->rejected.size() == 1);
  CHECK_THAT(v->rejected[0], Catch::Contains("(moved to "));
  CHECK_FALSE(e.file_exists(newest->path));
  const auto aside = dir / "rejected" / "ckpt-000000000008.safetensors";
  CHECK(e.file_exists(aside));
  auto reason = e.read_file(aside.string() + ".reason");
  REQUIRE(reason);
  CHECK_THAT(*reason, Catch::Contains("ckpt-000000000008.safetensors"));
  // rejected/ is no checkpoint: listing, pruning and loading ignore it.
  auto l = s.list();
  REQUIRE(l);
  CHECK(l->size() == 1);
  // A second rejection of the same name does not overwrite the first.
  REQUIRE(e.put(newest->path, "junk"));
  REQUIRE(s.newest_verified({default_max_checkpoint_bytes, true}));
  CHECK(e.file_exists(dir / "rejected" / "ckpt-000000000008.safetensors.1"));
}

TEST_CASE("newest_verified refuses a checkpoint over the cap without reading it",
          "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 5);
  REQUIRE(s.save(at_step(4)));
  auto v = s.newest_verified({16, false});
  REQUIRE(v);
  CHECK_FALSE(v->path);
  REQUIRE(v->rejected.size() == 1);
  CHECK_THAT(v->rejected[0], Catch::Contains("larger than the cap of 16 bytes"));
}

TEST_CASE("sweep_temp_files removes a killed writer's leftovers only", "[unit][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store s(e, dir, 5);
  REQUIRE(s.save(at_step(4)));
  REQUIRE(e.put(dir / "ckpt-000000000008.safetensors.tmp-ab-1", "half"));
  REQUIRE(e.put(dir / "notes.tmp-x", "half"));
  auto n = s.sweep_temp_files();
  REQUIRE(n);
  CHECK(*n == 2);
  CHECK(names(e, dir) == std::vector<std::string>{"ckpt-000000000004.safetensors"});
  checkpoint_store none(e, "/no/such/dir", 2);
  auto zero = none.sweep_temp_files();
  REQUIRE(zero);
  CHECK(*zero == 0);
}

TEST_CASE("checkpoint store save returns the digest verify reads back, at every size",
          "[unit][checkpoint_store]") {
  baton::os::mem_env mem;
  auto& real = baton::os::env::default_env();
  const auto real_dir = fs::temp_directory_path() / "baton-ckpt-save-digest-test";
  fs::remove_all(real_dir);
  // Empty, tiny, one write piece (256 KiB) exactly and either side of it, several pieces and
  // several 1 MiB verify chunks, and a last piece of one float.
  for (const std::int64_t floats : {0, 1, 65535, 65536, 65537, 3 * 65536 + 1, 1000003}) {
    for (const bool view : {false, true}) {
      for (baton::os::env* e : {static_cast<baton::os::env*>(&mem), &real}) {
        const bool beside = view && floats % 2 == 1;
        INFO(floats << " floats, " << (view ? "view" : "owned") << " save, "
                    << (e == &mem ? "mem_env" : "real file system")
                    << (beside ? ", hashed beside the writes" : ""));
        checkpoint_store s(*e, e == &mem ? dir : real_dir, 2);
        if (beside) hash_beside(s);
        checkpoint c = at_step(floats + 1);
        c.tensors[0].shape = {floats};
        c.tensors[0].bytes.resize(static_cast<std::size_t>(floats) * 4);
        for (std::size_t i = 0; i < c.tensors[0].bytes.size(); ++i) {
          c.tensors[0].bytes[i] = static_cast<char>(i * 31 + static_cast<std::size_t>(floats));
        }
        // A second tensor, so pieces of two tensors follow each other.
        c.tensors.push_back({"b", dtype::u8, {3}, "xyz"});
        auto saved = view ? s.save(view_of(c)) : s.save(c);
        REQUIRE(saved);
        CHECK(saved->path == s.path_for_step(floats + 1));
        CHECK_THAT(saved->digest, Catch::StartsWith("xxh64:"));
        auto read_back = s.verify(saved->path);
        REQUIRE(read_back);
        CHECK(saved->digest == *read_back);
        auto bytes = e->read_file(saved->path);
        REQUIRE(bytes);
        CHECK(saved->digest == *checkpoint_digest(*bytes));
      }
    }
  }
  fs::remove_all(real_dir);
}

TEST_CASE("checkpoint store save's digest is of the bytes written, not of the file",
          "[unit][checkpoint_store]") {
  // A disk that changes a byte after the write (here: just before the rename) leaves a file
  // that does not match the digest the writer announces, and verify() says so.
  baton::os::mem_env mem;
  baton::os::fault_env e(mem);
  checkpoint_store s(e, dir, 2);
  e.call_at(
      1,
      [&](baton::os::fault_env::op, const fs::path& from) {
        auto bytes = mem.read_file(from);
        REQUIRE(bytes);
        bytes->back() ^= 0x10;
        REQUIRE(mem.put(from, *bytes));
      },
      baton::os::fault_env::op::rename_file);
  auto saved = s.save(at_step(4));
  REQUIRE(saved);
  CHECK(e.faults_fired() == 1);
  auto clean = encode_checkpoint(at_step(4));
  REQUIRE(clean);
  CHECK(saved->digest == *checkpoint_digest(*clean));
  auto read_back = s.verify(saved->path);
  REQUIRE_FALSE(read_back);
  CHECK_THAT(read_back.error().message, Catch::Contains("digest mismatch"));
}

TEST_CASE("still_verified trusts a stat only for the newest file, unchanged",
          "[unit][checkpoint_store]") {
  const baton::os::file_identity id{1, 42, 1000, 1001};
  const verified_file known{dir / "ckpt-000000000008.safetensors", 8, 120, id};
  const std::vector<std::string> listing = {"ckpt-000000000004.safetensors",
                                            "ckpt-000000000008.safetensors",
                                            "ckpt-000000000009.safetensors.tmp-1-0", "rejected"};
  baton::os::entry_info same;
  same.kind = baton::os::entry_kind::regular;
  same.size = 120;
  same.identity = id;
  CHECK(still_verified(known, listing, same));

  // The file itself changed: another inode (replaced under the same name), another time
  // (written in place), a reset modification time (the change time moved), another size.
  for (int field = 0; field < 5; ++field) {
    INFO("field " << field);
    auto now = same;
    switch (field) {
      case 0:
        now.identity->inode = 43;
        break;
      case 1:
        now.identity->device = 2;
        break;
      case 2:
        now.identity->modified_ns += 1;
        break;
      case 3:
        now.identity->changed_ns += 1;
        break;
      case 4:
        now.size = 121;
        break;
    }
    CHECK_FALSE(still_verified(known, listing, now));
  }
  // No identity (an env that cannot tell), not a regular file any more, gone, a stat error.
  auto blind = same;
  blind.identity.reset();
  CHECK_FALSE(still_verified(known, listing, blind));
  auto link = same;
  link.kind = baton::os::entry_kind::symlink;
  CHECK_FALSE(still_verified(known, listing, link));
  CHECK_FALSE(still_verified(known, listing, baton::os::entry_info{}));
  CHECK_FALSE(still_verified(known, listing, baton::make_error("stat: I/O error")));

  // The walk would start elsewhere: a newer file or folder, or the file missing from the
  // listing. Same-step names sort before it (the walk reads them after it).
  auto with = [&](const std::string& name) {
    auto l = listing;
    l.push_back(name);
    return l;
  };
  CHECK_FALSE(still_verified(known, with("ckpt-000000000009.safetensors"), same));
  CHECK_FALSE(still_verified(known, with("ckpt-000000000012"), same));
  CHECK(still_verified(known, with("ckpt-0000000000008.safetensors"), same));
  CHECK(still_verified(known, with("ckpt-000000000008"), same));
  CHECK(still_verified(known, with("ckpt-000000000007.safetensors"), same));
  CHECK_FALSE(still_verified(known, {"ckpt-000000000004.safetensors"}, same));
  // A file whose name says another step than the one verified.
  auto other_step = known;
  other_step.step = 9;
  CHECK_FALSE(still_verified(other_step, listing, same));
}

namespace {
// A mem_env that counts the opens a verification makes.
struct counting_env : baton::os::mem_env {
  int untrusted_opens = 0;
  baton::result<std::unique_ptr<baton::os::readable_file>> new_untrusted_readable_file(
      const fs::path& path, const baton::os::untrusted_file_limits& limits) override {
    ++untrusted_opens;
    return mem_env::new_untrusted_readable_file(path, limits);
  }
};
}  // namespace

TEST_CASE("newest_verified with a known file reads nothing while it is unchanged",
          "[unit][checkpoint_store]") {
  counting_env mem;
  checkpoint_store s(mem, dir, 3);
  REQUIRE(s.save(at_step(4)));
  auto saved = s.save(at_step(8));
  REQUIRE(saved);
  auto info = mem.stat_no_follow(saved->path);
  REQUIRE(info);
  REQUIRE(info->identity);
  const verified_file known{saved->path, 8, info->size, *info->identity};

  // Unchanged: answered from the listing and a stat, without opening any file.
  auto fast = s.newest_verified({}, known);
  REQUIRE(fast);
  REQUIRE(fast->path);
  CHECK(*fast->path == saved->path);
  CHECK(fast->step == 8);
  CHECK(fast->rejected.empty());
  CHECK(mem.untrusted_opens == 0);
  // Without a known file, the same answer by reading the newest file.
  auto full = s.newest_verified({});
  REQUIRE(full);
  CHECK(*full->path == saved->path);
  CHECK(mem.untrusted_opens == 1);

  // Replaced under the same name by a damaged copy: a new identity, so the full walk runs,
  // rejects it and falls back to step 4.
  auto bytes = mem.read_file(saved->path);
  REQUIRE(bytes);
  bytes->back() ^= 1;
  REQUIRE(mem.put(saved->path, *bytes));
  auto slow = s.newest_verified({}, known);
  REQUIRE(slow);
  REQUIRE(slow->path);
  CHECK(slow->step == 4);
  REQUIRE(slow->rejected.size() == 1);
  CHECK_THAT(slow->rejected[0], Catch::Contains("digest mismatch"));
  CHECK(mem.untrusted_opens == 3);
}
