// What the tests of the dataset loader (tests/worker/dataset*_test.cpp, one per source file of
// worker/dataset*.cpp) share: an env that serves files from a map, so a loader is seen to read
// only through os::env::read_file, and builders for CSV specs and .npy file bytes.
#pragma once

#include <bit>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "os/env.h"
#include "worker/dataset.h"

namespace baton::worker::testing {

namespace fs = std::filesystem;
using baton::protocol::csv_data;
using baton::protocol::loss_kind;
using baton::protocol::npy_data;
using baton::worker::dataset;
using baton::worker::load_dataset;

// Files live in a map: the loader must read only through os::env::read_file.
class map_env : public baton::os::env {
 public:
  std::map<std::string, std::string> files;

  baton::result<std::unique_ptr<baton::os::writable_file>> new_writable_file(
      const fs::path& path) override {
    return baton::make_error("map_env: cannot write " + path.string());
  }
  baton::result<std::string> read_file(const fs::path& path) override {
    auto it = files.find(path.string());
    if (it == files.end()) return baton::make_error(path.string() + ": no such file");
    return it->second;
  }
  baton::status rename_file(const fs::path&, const fs::path&) override {
    return baton::make_error("map_env: read-only");
  }
  baton::status remove_file(const fs::path&) override {
    return baton::make_error("map_env: read-only");
  }
  baton::status sync_dir(const fs::path&) override { return {}; }
  baton::status create_dirs(const fs::path&) override { return {}; }
  bool file_exists(const fs::path& path) override { return files.count(path.string()) != 0; }
  baton::result<std::vector<std::string>> list_dir(const fs::path&) override {
    return std::vector<std::string>{};
  }
};

inline std::string error_of(const baton::result<dataset>& r) {
  REQUIRE_FALSE(r);
  return r.error().message;
}

inline csv_data csv(const std::string& path, std::variant<std::int64_t, std::string> label,
                    bool header = true, bool standardize = false) {
  csv_data c;
  c.path = path;
  c.label_column = std::move(label);
  c.header = header;
  c.standardize = standardize;
  return c;
}

// Loads `text` as /d/data.csv.
inline baton::result<dataset> load_csv_text(const std::string& text, const csv_data& spec,
                                            loss_kind loss = loss_kind::mse,
                                            std::int64_t units = 1) {
  map_env e;
  e.files[spec.path.string()] = text;
  return load_dataset(e, spec, loss, units);
}

// The bytes np.save writes: magic, version, little-endian header length, the dict padded with
// spaces to a multiple of 64 bytes and ended by '\n', then the raw data.
inline std::string npy_file(const std::string& descr, const std::string& shape,
                            const std::string& data, int major = 1, bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t len = dict.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + dict + data;
}

// A v1 file with `dict` as the header, unpadded.
inline std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

template <class T>
inline std::string raw_bytes(const std::vector<T>& v) {
  static_assert(std::endian::native == std::endian::little, "test data is written little-endian");
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

inline npy_data npy_paths() {
  npy_data n;
  n.features = "/d/x.npy";
  n.labels = "/d/y.npy";
  return n;
}

inline baton::result<dataset> load_npy_bytes(const std::string& x, const std::string& y,
                                             loss_kind loss = loss_kind::binary_crossentropy,
                                             std::int64_t units = 1) {
  map_env e;
  e.files["/d/x.npy"] = x;
  e.files["/d/y.npy"] = y;
  return load_dataset(e, npy_paths(), loss, units);
}

inline const std::string x_f4_3x2 =
    npy_file("<f4", "(3, 2)", raw_bytes(std::vector<float>{0, 1, 2, 3, 4, 5}));

}  // namespace baton::worker::testing
