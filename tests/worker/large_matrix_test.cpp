#include "worker/large_matrix.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>

using baton::worker::idx;
using baton::worker::large_matrix;
using baton::worker::storage_fill;

namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

TEST_CASE("large_matrix is a rows x cols row-major view over its own storage",
          "[unit][large_matrix]") {
  large_matrix<float> m(3, 5, storage_fill::zeroed);
  auto& v = m.view();
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 5);
  CHECK(v.isZero(0));
  v(1, 2) = 7.0f;
  CHECK(v.data()[1 * 5 + 2] == 7.0f);
  CHECK(address(v.data()) % 64 == 0);
}

TEST_CASE("a large_matrix of a huge page or more starts on one", "[unit][large_matrix]") {
  // A layer's kernel of the seed job: 2000 x 2000 floats, 15.3 MiB.
  large_matrix<float> m(2000, 2000, storage_fill::uninitialised);
#if defined(__linux__)
  CHECK(address(m.view().data()) % (std::uintptr_t{2} << 20) == 0);
#else
  CHECK(address(m.view().data()) % 64 == 0);
#endif
  m.view()(1999, 1999) = 1.5f;
  CHECK(m.view()(1999, 1999) == 1.5f);
}

TEST_CASE("moving a large_matrix hands over its storage and its view", "[unit][large_matrix]") {
  large_matrix<double> a(4, 6, storage_fill::zeroed);
  a.view()(3, 5) = 2.5;
  const double* data = a.view().data();

  large_matrix<double> b(std::move(a));
  CHECK(b.view().data() == data);
  CHECK(b.view().rows() == 4);
  CHECK(b.view().cols() == 6);
  CHECK(b.view()(3, 5) == 2.5);
  CHECK(a.view().data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK(a.view().size() == 0);

  // Assignment rebinds the view to the new storage rather than copying elements into the old.
  large_matrix<double> c(1, 1, storage_fill::zeroed);
  c = std::move(b);
  CHECK(c.view().data() == data);
  CHECK(c.view().rows() == 4);
  CHECK(c.view()(3, 5) == 2.5);
  CHECK(b.view().data() == nullptr);  // NOLINT(bugprone-use-after-move)
}
