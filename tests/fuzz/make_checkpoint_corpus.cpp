// Writes the small valid checkpoints that seed corpus/fuzz_checkpoint/, through the real
// encoder, so the seeds follow the format. `--check DIR` instead verifies that DIR holds exactly
// these bytes: a ctest runs it, so a format change that makes the committed seeds stale (and the
// fuzzer blind past the header) fails until they are regenerated with `make_checkpoint_corpus DIR`.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "protocol/checkpoint.h"

namespace fs = std::filesystem;
using namespace baton::protocol;

namespace {

tensor make(std::string name, dtype type, std::vector<std::int64_t> shape, unsigned char fill) {
  tensor t;
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  std::size_t n = dtype_size(type);
  for (auto d : t.shape) n *= static_cast<std::size_t>(d);
  t.bytes.resize(n);
  for (std::size_t i = 0; i < n; ++i) t.bytes[i] = static_cast<char>(fill + i);
  return t;
}

std::vector<std::pair<std::string, checkpoint>> seeds() {
  std::vector<std::pair<std::string, checkpoint>> out;
  checkpoint empty;
  empty.metadata = {{"step", "0"}};
  out.emplace_back("01-empty.ckpt", empty);

  checkpoint one;
  one.metadata = {{"step", "7"}, {"job", "seed"}, {"epoch", "1"}};
  one.tensors.push_back(make("layers.0.kernel", dtype::f32, {2, 3}, 1));
  out.emplace_back("02-one-tensor.ckpt", one);

  checkpoint all;
  all.metadata = {{"step", "123"}, {"job", "all-dtypes"}, {"epoch", "0"}};
  const dtype types[] = {dtype::f32, dtype::f64, dtype::i64, dtype::u64,
                         dtype::u32, dtype::i32, dtype::u8};
  for (const auto t : types) all.tensors.push_back(make(std::string(to_string(t)), t, {2}, 9));
  out.emplace_back("03-all-dtypes.ckpt", all);

  checkpoint odd;
  odd.metadata = {{"step", "18446744"}, {"note", "\xc3\xbcnicode \"quoted\""}};
  odd.tensors.push_back(make("scalar", dtype::f64, {}, 3));
  odd.tensors.push_back(make("zero", dtype::f32, {0, 4}, 0));
  odd.tensors.push_back(make("bytes", dtype::u8, {3}, 200));
  out.emplace_back("04-scalar-and-empty.ckpt", odd);

  checkpoint trainer;  // the shape of what the default worker writes, in miniature
  trainer.metadata = {{"step", "40"}, {"job", "tiny"}, {"epoch", "2"}};
  trainer.tensors.push_back(make("layers.0.kernel", dtype::f32, {3, 2}, 5));
  trainer.tensors.push_back(make("layers.0.bias", dtype::f32, {2}, 6));
  trainer.tensors.push_back(make("optimizer.adam.m.layers.0.kernel", dtype::f32, {3, 2}, 7));
  trainer.tensors.push_back(make("optimizer.adam.iterations", dtype::i64, {}, 8));
  trainer.tensors.push_back(make("rng.state", dtype::u64, {4}, 11));
  out.emplace_back("05-trainer-like.ckpt", trainer);
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::strcmp(argv[1], "--check") == 0;
  if (!(argc == 2 || check)) {
    std::fprintf(stderr, "usage: make_checkpoint_corpus [--check] DIR\n");
    return 64;
  }
  const fs::path dir = argv[argc - 1];
  int stale = 0;
  for (const auto& [name, c] : seeds()) {
    auto bytes = encode_checkpoint(c);
    if (!bytes) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), bytes.error().message.c_str());
      return 1;
    }
    if (auto back = decode_checkpoint(*bytes, name); !back) {
      std::fprintf(stderr, "%s\n", back.error().message.c_str());
      return 1;
    }
    const fs::path p = dir / name;
    if (check) {
      if (read(p) != *bytes) {
        std::fprintf(stderr, "%s is stale: rerun make_checkpoint_corpus %s\n",
                     p.string().c_str(), dir.string().c_str());
        ++stale;
      }
    } else {
      std::ofstream(p, std::ios::binary) << *bytes;
      std::printf("wrote %s (%zu bytes)\n", p.string().c_str(), bytes->size());
    }
  }
  return stale == 0 ? 0 : 1;
}
