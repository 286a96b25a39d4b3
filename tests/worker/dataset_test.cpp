// worker/dataset.cpp: load_dataset's checks before any source, and its dispatch to the sources
// with files read through the real default env.
#include "worker/dataset.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/dataset_fixtures.h"

using namespace baton::worker::testing;
using baton::protocol::synthetic_data;
using baton::worker::row_matrix;

TEST_CASE("csv and npy load from real files through the default env", "[unit][dataset]") {
  auto& e = baton::os::env::default_env();
  const fs::path dir = fs::temp_directory_path() / "baton-dataset-test";
  fs::remove_all(dir);
  REQUIRE(e.create_dirs(dir));
  REQUIRE(baton::os::write_file_atomic(e, dir / "data.csv", "a,b,y\n1,2,0\n3,4,1\n"));
  auto c = load_dataset(e, csv((dir / "data.csv").string(), "y"), loss_kind::mse, 1);
  REQUIRE(c);
  CHECK(c->x(1, 1) == 4.0f);
  REQUIRE(baton::os::write_file_atomic(e, dir / "x.npy", x_f4_3x2));
  REQUIRE(baton::os::write_file_atomic(
      e, dir / "y.npy", npy_file("<f8", "(3,)", raw_bytes(std::vector<double>{0.5, 1.5, 2.5}))));
  npy_data n;
  n.features = dir / "x.npy";
  n.labels = dir / "y.npy";
  auto d = load_dataset(e, n, loss_kind::mse, 1);
  REQUIRE(d);
  CHECK(d->y(2, 0) == 2.5f);
  fs::remove_all(dir);
}

TEST_CASE("a model without an output unit is refused before any data is read", "[unit][dataset]") {
  map_env e;
  CHECK_THAT(error_of(load_dataset(e, synthetic_data{10, 4, 1}, loss_kind::mse, 0)),
             Catch::Contains("at least one output unit"));
  CHECK_THAT(error_of(load_dataset(e, csv("/d/missing.csv", "y"), loss_kind::mse, 0)),
             Catch::Contains("at least one output unit"));
}
