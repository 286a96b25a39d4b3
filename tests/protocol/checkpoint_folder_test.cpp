#include "protocol/checkpoint_folder.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "os/fault_env.h"
#include "os/mem_env.h"
#include "protocol/checkpoint_store.h"
#include "protocol/digest.h"

using namespace baton::protocol;
namespace fs = std::filesystem;

namespace {

const fs::path ckpt_dir = "/jobs/j/checkpoints";
const fs::path staging = ckpt_dir / ".staging-0";

const std::map<std::string, std::string> sample_files = {
    {"model.pt", std::string(3000, 'm') + "weights"},
    {"optim.pt", "adam moments"},
    {"sub/rng.bin", "\x01\x02\x03"},
    {"sub/deeper/data-order.json", "[3,1,2]"},
};

// Writes `files` into staging/<name> the way a worker would.
fs::path write_staged(baton::os::mem_env& e, const std::string& name,
                      const std::map<std::string, std::string>& files = sample_files) {
  const fs::path dir = staging / name;
  REQUIRE(e.create_dirs(dir));
  for (const auto& [rel, data] : files) {
    const fs::path p = dir / fs::path(rel);
    REQUIRE(e.create_dirs(p.parent_path()));
    REQUIRE(e.put(p, data));
  }
  return dir;
}

fs::path seal(baton::os::mem_env& e, std::int64_t step,
              const std::map<std::string, std::string>& files = sample_files) {
  const auto dir = write_staged(e, "step-" + std::to_string(step), files);
  auto sealed = seal_checkpoint_folder(e, dir, ckpt_dir, "j", step);
  REQUIRE(sealed);
  return sealed->path;
}

std::string verify_error(baton::os::env& e, const fs::path& folder) {
  auto r = verify_checkpoint_folder(e, folder);
  REQUIRE_FALSE(r);
  return r.error().message;
}

// The manifest's bytes with a valid self-digest for whatever they now say.
std::string redigest(std::string bytes) {
  const auto at = bytes.find("xxh64:") + 6;
  bytes.replace(at, 16, std::string(16, '0'));
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(baton::protocol::xxh64(bytes)));
  bytes.replace(at, 16, hex);
  return bytes;
}

}  // namespace

TEST_CASE("a sealed folder holds a manifest of every file and verifies",
          "[unit][checkpoint_folder]") {
  baton::os::mem_env e;
  const auto dir = write_staged(e, "step-1570");
  auto sealed = seal_checkpoint_folder(e, dir, ckpt_dir, "job-1", 1570);
  REQUIRE(sealed);
  CHECK(sealed->path == ckpt_dir / "ckpt-000000001570");
  CHECK_FALSE(e.file_exists(dir));
  REQUIRE(sealed->manifest.files.size() == 4);
  CHECK(sealed->manifest.files[0].path == "model.pt");
  CHECK(sealed->manifest.files[1].path == "optim.pt");
  CHECK(sealed->manifest.files[2].path == "sub/deeper/data-order.json");
  CHECK(sealed->manifest.files[3].path == "sub/rng.bin");
  CHECK(sealed->manifest.files[1].xxh64 == baton::protocol::xxh64("adam moments"));
  CHECK(sealed->manifest.files[1].size == 12);

  auto bytes = e.read_file(sealed->path / folder_manifest_name);
  REQUIRE(bytes);
  CHECK(bytes->rfind("{\"digest\":\"xxh64:", 0) == 0);
  CHECK_THAT(*bytes, Catch::Contains(R"("format":"baton-folder-checkpoint","format_version":1)"));
  CHECK_THAT(*bytes, Catch::Contains(R"("job":"job-1","step":1570)"));
  auto m = verify_checkpoint_folder(e, sealed->path);
  REQUIRE(m);
  CHECK(m->step == 1570);
  CHECK(m->job == "job-1");
  CHECK(m->files.size() == 4);
}

TEST_CASE("the manifest encodes and decodes with its self-digest", "[unit][checkpoint_folder]") {
  folder_manifest m;
  m.job = "a \"quoted\" job";
  m.step = 42;
  m.files = {{"a", 0, 1}, {"b/c", 7, 0xfedcba9876543210ull}};
  const auto bytes = encode_manifest(m);
  auto back = decode_manifest(bytes, "m.json");
  REQUIRE(back);
  CHECK(back->job == m.job);
  CHECK(back->step == 42);
  REQUIRE(back->files.size() == 2);
  CHECK(back->files[1].path == "b/c");
  CHECK(back->files[1].size == 7);
  CHECK(back->files[1].xxh64 == 0xfedcba9876543210ull);

  const auto fails = [](const std::string& text, const std::string& why) {
    INFO(text);
    auto r = decode_manifest(text, "m.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::StartsWith("m.json: ") && Catch::Contains(why));
  };
  fails("not json", "not JSON");
  fails(redigest(R"({"digest":"xxh64:0000000000000000","digest":"x"})"), "duplicate key");
  fails(bytes.substr(0, bytes.size() - 3), "not JSON");
  auto edited = bytes;
  edited.replace(edited.find("\"step\":42"), 9, "\"step\":43");
  fails(edited, "bad digest");
  auto fmt = bytes;
  fmt.replace(fmt.find("baton-folder-checkpoint"), 5, "other");
  fails(redigest(fmt), "format is not");
  auto ver = bytes;
  ver.replace(ver.find("\"format_version\":1"), 18, "\"format_version\":2");
  fails(redigest(ver), "format_version 2");
  folder_manifest unsorted = m;
  std::swap(unsorted.files[0], unsorted.files[1]);
  fails(encode_manifest(unsorted), "not sorted");
  for (const char* bad : {"../x", "/abs", "a//b", "a/./b", "", "baton-manifest.json"}) {
    folder_manifest p = m;
    p.files = {{bad, 1, 1}};
    fails(encode_manifest(p), "files[0]");
  }
}

TEST_CASE("every kind of damage to a sealed folder is named by file and reason",
          "[unit][checkpoint_folder]") {
  baton::os::mem_env e;
  const auto good = seal(e, 10);
  const auto folder = seal(e, 20);
  const fs::path manifest = folder / folder_manifest_name;
  const auto original = *e.read_file(manifest);

  std::string expect_file;
  std::string expect_reason;
  SECTION("a flipped byte") {
    auto data = *e.read_file(folder / "model.pt");
    data[1234] ^= 0x10;
    REQUIRE(e.put(folder / "model.pt", data));
    expect_file = (folder / "model.pt").string();
    expect_reason = "content hashes to xxh64";
  }
  SECTION("a truncated file") {
    auto data = *e.read_file(folder / "sub/rng.bin");
    REQUIRE(e.put(folder / "sub/rng.bin", data.substr(0, 2)));
    expect_file = (folder / "sub" / "rng.bin").string();
    expect_reason = "2 bytes, the manifest says 3";
  }
  SECTION("a missing file") {
    REQUIRE(e.remove_file(folder / "optim.pt"));
    expect_file = (folder / "optim.pt").string();
    expect_reason = "missing (listed in the manifest)";
  }
  SECTION("an extra file") {
    REQUIRE(e.put(folder / "sub/extra.txt", "hello"));
    expect_file = (folder / "sub" / "extra.txt").string();
    expect_reason = "extra file (not in the manifest)";
  }
  SECTION("a manifest that lies about a size, digest recomputed") {
    auto lie = original;
    lie.replace(lie.find("\"size\":12"), 9, "\"size\":13");
    REQUIRE(e.put(manifest, redigest(lie)));
    expect_file = (folder / "optim.pt").string();
    expect_reason = "12 bytes, the manifest says 13";
  }
  SECTION("a manifest that lies about a hash, digest recomputed") {
    auto lie = original;
    const auto at = lie.find("\"xxh64\":\"", lie.find("optim.pt")) + 9;
    lie[at] = lie[at] == '0' ? '1' : '0';
    REQUIRE(e.put(manifest, redigest(lie)));
    expect_file = (folder / "optim.pt").string();
    expect_reason = "the manifest says";
  }
  SECTION("a manifest that lies, digest left alone") {
    auto lie = original;
    lie.replace(lie.find("\"size\":12"), 9, "\"size\":13");
    REQUIRE(e.put(manifest, lie));
    expect_file = manifest.string();
    expect_reason = "bad digest";
  }
  SECTION("a manifest for another step") {
    REQUIRE(e.put(manifest, *e.read_file(good / folder_manifest_name)));
    expect_file = manifest.string();
    expect_reason = "says step 10, the folder name 20";
  }
  SECTION("no manifest") {
    REQUIRE(e.remove_file(manifest));
    expect_file = manifest.string();
    expect_reason = "missing (the folder was never sealed)";
  }
  SECTION("a folder where a file was") {
    REQUIRE(e.remove_file(folder / "optim.pt"));
    REQUIRE(e.create_dirs(folder / "optim.pt"));
    expect_file = (folder / "optim.pt").string();
    expect_reason = "a folder, the manifest lists a regular file";
  }
  const auto why = verify_error(e, folder);
  CHECK_THAT(why, Catch::StartsWith(expect_file + ": ") && Catch::Contains(expect_reason));

  checkpoint_store store(e, ckpt_dir, 5);
  auto v = store.newest_verified();
  REQUIRE(v);
  REQUIRE(v->path);
  CHECK(*v->path == good);
  CHECK(v->step == 10);
  CHECK(v->is_folder);
  REQUIRE(v->rejected.size() == 1);
  CHECK(v->rejected[0] == why);
}

TEST_CASE("sealing refuses a forged manifest and replaces a damaged folder of the same step",
          "[unit][checkpoint_folder]") {
  baton::os::mem_env e;
  const auto forged = write_staged(e, "step-5");
  REQUIRE(e.put(forged / folder_manifest_name, "{}"));
  auto r = seal_checkpoint_folder(e, forged, ckpt_dir, "j", 5);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message,
             Catch::StartsWith((forged / folder_manifest_name).string() + ": the worker wrote"));
  CHECK(e.file_exists(forged));
  CHECK_FALSE(e.file_exists(ckpt_dir / "ckpt-000000000005"));

  // A damaged ckpt-5 (a seal interrupted after the rename, then corrupted) is replaced whole.
  REQUIRE(e.create_dirs(ckpt_dir / "ckpt-000000000006"));
  REQUIRE(e.put(ckpt_dir / "ckpt-000000000006" / "junk", "x"));
  const auto path = seal(e, 6, {{"only", "one"}});
  CHECK(verify_checkpoint_folder(e, path));
  CHECK_FALSE(e.file_exists(path / "junk"));

  // A worker folder with nothing in it seals too: a trainer may keep all state in the name.
  const auto empty = seal(e, 7, {});
  auto m = verify_checkpoint_folder(e, empty);
  REQUIRE(m);
  CHECK(m->files.empty());
}

TEST_CASE("the store lists, picks and prunes files and folders together by step",
          "[unit][checkpoint_folder][checkpoint_store]") {
  baton::os::mem_env e;
  checkpoint_store store(e, ckpt_dir, 3);
  checkpoint c;
  c.metadata[meta::job] = "j";
  c.metadata[meta::step] = "15";
  c.metadata[meta::epoch] = "0";
  c.tensors.push_back({"w", dtype::f32, {1}, std::string(4, '\0')});
  REQUIRE(store.save(c));
  seal(e, 10);
  seal(e, 20);
  REQUIRE(e.create_dirs(ckpt_dir / ".staging-3" / "step-99"));
  REQUIRE(e.put(ckpt_dir / "notes.txt", "not a checkpoint"));
  REQUIRE(e.create_dirs(ckpt_dir / "ckpt-12"));  // too few digits: not a checkpoint name

  auto l = store.list();
  REQUIRE(l);
  CHECK(*l == std::vector<fs::path>{ckpt_dir / "ckpt-000000000010",
                                    ckpt_dir / "ckpt-000000000015.safetensors",
                                    ckpt_dir / "ckpt-000000000020"});
  auto v = store.newest_verified();
  REQUIRE(v);
  CHECK(v->step == 20);
  CHECK(v->is_folder);
  CHECK(v->rejected.empty());

  // Damage the newest folder: the file checkpoint before it is chosen, with the reason.
  REQUIRE(e.remove_file(ckpt_dir / "ckpt-000000000020" / "model.pt"));
  v = store.newest_verified();
  REQUIRE(v);
  REQUIRE(v->path);
  CHECK(*v->path == ckpt_dir / "ckpt-000000000015.safetensors");
  CHECK_FALSE(v->is_folder);
  REQUIRE(v->rejected.size() == 1);
  CHECK_THAT(v->rejected[0], Catch::Contains("model.pt: missing"));

  // Pruning counts both kinds and keeps the one named.
  const auto newest = seal(e, 30);
  checkpoint_store keep2(e, ckpt_dir, 2);
  REQUIRE(keep2.prune(newest));
  l = keep2.list();
  REQUIRE(l);
  CHECK(*l == std::vector<fs::path>{ckpt_dir / "ckpt-000000000020", newest});
  CHECK_FALSE(e.file_exists(ckpt_dir / "ckpt-000000000010" / "model.pt"));
  CHECK(e.file_exists(ckpt_dir / ".staging-3" / "step-99"));
  CHECK(e.file_exists(ckpt_dir / "notes.txt"));

  // The built-in trainer's loader reads files only: folders are not for it.
  auto f = store.load_newest_file();
  REQUIRE(f);
  CHECK_FALSE(f->has_value());
}

TEST_CASE("no random corruption of a sealed folder verifies or is resumed from",
          "[unit][checkpoint_folder][corruption]") {
  std::mt19937_64 rng(20261201);
  const auto pick = [&](std::size_t n) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::size_t>(0, n - 1)(rng));
  };
  int kinds[5] = {};
  constexpr int rounds = 1200;
  for (int round = 0; round < rounds; ++round) {
    baton::os::mem_env e;
    const auto good = seal(e, 10);
    const auto folder = seal(e, 20);
    std::vector<fs::path> files;  // every file of the newest, the manifest included
    for (const auto& [p, _] : e.files()) {
      if (fs::path(p).string().rfind(folder.generic_string() + "/", 0) == 0) files.push_back(p);
    }
    REQUIRE(files.size() == sample_files.size() + 1);
    const fs::path victim = files[pick(files.size())];
    const auto data = *e.read_file(victim);
    const int kind = static_cast<int>(pick(5));
    ++kinds[kind];
    INFO("round " << round << " kind " << kind << " " << victim);
    switch (kind) {
      case 0: {  // flip: a random nonzero xor at a random byte
        auto d = data;
        d[pick(d.size())] ^= static_cast<char>(1 + pick(255));
        REQUIRE(e.put(victim, d));
        break;
      }
      case 1:  // truncate to any shorter length
        REQUIRE(e.put(victim, data.substr(0, pick(data.size()))));
        break;
      case 2:  // delete
        REQUIRE(e.remove_file(victim));
        break;
      case 3: {  // add a file next to the victim
        REQUIRE(e.put(victim.parent_path() / ("added-" + std::to_string(pick(1000))), "x"));
        break;
      }
      case 4:  // rename within its folder
        REQUIRE(e.rename_file(victim, victim.parent_path() / (victim.filename().string() + ".x")));
        break;
    }
    REQUIRE_FALSE(verify_checkpoint_folder(e, folder));
    checkpoint_store store(e, ckpt_dir, 5);
    auto v = store.newest_verified();
    REQUIRE(v);
    REQUIRE(v->path);
    CHECK(*v->path == good);
    CHECK(v->rejected.size() == 1);
  }
  for (int k : kinds) CHECK(k > rounds / 10);  // every kind was tried many times
}

TEST_CASE("a seal that fails part way leaves no checkpoint and the previous one chosen",
          "[unit][checkpoint_folder]") {
  using op = baton::os::fault_env::op;
  const auto [kind, nth] = GENERATE(table<op, int>({{op::sync, 1},
                                                    {op::sync, 3},
                                                    {op::new_writable_file, 1},
                                                    {op::append, 1},
                                                    {op::rename_file, 1},
                                                    {op::rename_file, 2},
                                                    {op::sync_dir, 1}}));
  INFO(baton::os::fault_env::to_string(kind) << " #" << nth);
  baton::os::mem_env base;
  const auto good = seal(base, 10);
  baton::os::fault_env e(base);
  const auto dir = write_staged(base, "step-20");
  e.fail_at(nth, "injected", false, kind);
  auto r = seal_checkpoint_folder(e, dir, ckpt_dir, "j", 20);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("injected"));
  CHECK(e.faults_fired() == 1);
  checkpoint_store store(base, ckpt_dir, 5);
  auto v = store.newest_verified();
  REQUIRE(v);
  REQUIRE(v->path);
  // A failure after the rename (the folder sync) leaves a sealed, whole ckpt-20: also fine to
  // resume from, since it verifies; any earlier failure leaves no ckpt-20 at all.
  if (kind == op::sync_dir && base.file_exists(ckpt_dir / "ckpt-000000000020")) {
    CHECK(v->step == 20);
  } else {
    CHECK_FALSE(base.file_exists(ckpt_dir / "ckpt-000000000020"));
    CHECK(*v->path == good);
  }
}

TEST_CASE("a folder over the cap is refused before any file is hashed",
          "[unit][checkpoint_folder]") {
  baton::os::mem_env e;
  const auto staged = write_staged(e, "big", {{"a.bin", std::string(600, 'a')},
                                              {"sub/b.bin", std::string(600, 'b')}});
  auto r = seal_checkpoint_folder(e, staged, ckpt_dir, "j", 3, 1000);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message,
             Catch::Contains("its files add up to more than the cap of 1000 bytes"));
  CHECK(e.file_exists(staged));  // left where it was for the caller to discard
  const auto sealed = seal(e, 4);
  auto v = verify_checkpoint_folder(e, sealed, 8);
  REQUIRE_FALSE(v);
  CHECK_THAT(v.error().message, Catch::Contains("more than the cap of 8 bytes"));
  CHECK(verify_checkpoint_folder(e, sealed));
}

TEST_CASE("sealing a folder on a full disk says so with errc::no_space",
          "[unit][checkpoint_folder]") {
  baton::os::mem_env base;
  baton::os::fault_env e(base);
  const auto staged = write_staged(base, "full", sample_files);
  e.fail_at(1, "No space left on device", true, baton::os::fault_env::op::new_writable_file);
  auto r = seal_checkpoint_folder(e, staged, ckpt_dir, "j", 3);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == baton::errc::no_space);
}
