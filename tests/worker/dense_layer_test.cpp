#include "worker/dense_layer.h"

#include <catch2/catch.hpp>

#include "test_support.h"
#include "worker/parallel.h"

using namespace baton::worker;
using namespace baton::worker::testing;

namespace {

dense_layer<double> seeded_layer(idx in, idx units, activation a, idx max_batch) {
  dense_layer<double> l(in, units, a, max_batch);
  l.kernel() = normal_matrix<double>(in, units, 21, 0.7);
  l.bias() = normal_matrix<double>(1, units, 22, 0.3);
  return l;
}

}  // namespace

TEST_CASE("dense forward computes act(X W + b)", "[unit]") {
  auto l = seeded_layer(4, 3, activation::tanh, 5);
  const row_matrix<double> x = normal_matrix<double>(5, 4, 23);
  const auto y = l.forward(cview(x));
  REQUIRE(y.rows() == 5);
  for (idx r = 0; r < 5; ++r) {
    for (idx j = 0; j < 3; ++j) {
      double z = l.bias()(j);
      for (idx k = 0; k < 4; ++k) z += x(r, k) * l.kernel()(k, j);
      CHECK(close(y(r, j), std::tanh(z), 1e-14, 1e-15));
    }
  }
}

TEST_CASE("dense backward dW, db, dX agree with central differences", "[unit]") {
  for (activation a : {activation::relu, activation::sigmoid, activation::tanh, activation::linear,
                       activation::softmax}) {
    CAPTURE(activation_name(a));
    // Batch 3 in a layer built for 6: the short final batch path.
    auto l = seeded_layer(4, 3, a, 6);
    row_matrix<double> x = normal_matrix<double>(3, 4, 24);
    const row_matrix<double> c = normal_matrix<double>(3, 3, 25);
    // L = sum(c * Y), so dL/dY = c.
    auto loss = [&] {
      const auto y = l.forward(cview(x));
      return (y.array() * c.array()).sum();
    };
    loss();
    l.output_grad() = c;
    row_matrix<double> dx(3, 4);
    l.backward(cview(x), false, dx.data());
    const row_matrix<double> dw = l.kernel_grad();
    const row_vector<double> db = l.bias_grad();
    for (idx i = 0; i < dw.size(); ++i) {
      CHECK(close(dw.data()[i], central_difference(loss, l.kernel().data()[i]), 1e-7, 1e-9));
    }
    for (idx i = 0; i < db.size(); ++i) {
      CHECK(close(db(i), central_difference(loss, l.bias().data()[i]), 1e-7, 1e-9));
    }
    for (idx i = 0; i < x.size(); ++i) {
      CHECK(close(dx.data()[i], central_difference(loss, x.data()[i]), 1e-7, 1e-9));
    }
  }
}

TEST_CASE("a layer without an input gradient computes the same dW and db", "[unit]") {
  for (activation a : {activation::relu, activation::softmax}) {
    CAPTURE(activation_name(a));
    auto with = seeded_layer(4, 3, a, 6);
    dense_layer<double> without(4, 3, a, 6, storage_fill::zeroed, input_gradient::not_needed);
    without.kernel() = with.kernel();
    without.bias() = with.bias();
    const row_matrix<double> x = normal_matrix<double>(5, 4, 26);
    const row_matrix<double> c = normal_matrix<double>(5, 3, 27);
    for (auto* l : {&with, &without}) {
      l->forward(cview(x));
      l->output_grad() = c;
    }
    row_matrix<double> dx(5, 4);
    with.backward(cview(x), false, dx.data());
    without.backward(cview(x), false, nullptr);
    CHECK(without.kernel_grad() == with.kernel_grad());
    CHECK(without.bias_grad() == with.bias_grad());
  }
}

TEST_CASE("a short batch reuses the max-batch buffers", "[unit]") {
  dense_layer<float> l(3, 2, activation::relu, 8);
  const row_matrix<float> x = normal_matrix<float>(8, 3, 26);
  const float* full = l.forward(cview(x)).data();
  const row_matrix<float> x2 = x.topRows(2);
  const auto y = l.forward(cview(x2));
  CHECK(y.data() == full);
  CHECK(y.rows() == 2);
  CHECK(l.output_grad().rows() == 2);
}

TEST_CASE("threaded dense passes are deterministic at 2 threads", "[unit]") {
  const int before = thread_count();
  set_thread_count(2);
  auto run = [] {
    dense_layer<float> l(300, 400, activation::relu, 32);
    l.kernel() = normal_matrix<float>(300, 400, 27, 0.05);
    const row_matrix<float> x = normal_matrix<float>(32, 300, 28);
    l.forward(cview(x));
    l.output_grad() = normal_matrix<float>(32, 400, 29);
    row_matrix<float> dx(32, 300);
    l.backward(cview(x), false, dx.data());
    return std::make_tuple(row_matrix<float>(l.output()), row_matrix<float>(l.kernel_grad()),
                           row_vector<float>(l.bias_grad()), dx);
  };
  CHECK(run() == run());
  set_thread_count(before);
}

TEST_CASE("blocked kernels match plain sums on ragged shapes, 1 and 2 threads", "[unit]") {
  // Shapes that leave row, vector and scalar remainders in every tile (and a depth beyond one
  // forward depth block), in float and double, against sums in long double.
  const int before = thread_count();
  struct shape {
    idx in, units, batch, max_batch;
  };
  for (const shape s : {shape{37, 53, 13, 16}, shape{300, 67, 32, 32}, shape{5, 1, 3, 8},
                        shape{40, 1, 19, 32}, shape{1, 130, 1, 1}}) {
    for (int threads : {1, 2}) {
      CAPTURE(s.in, s.units, s.batch, threads);
      set_thread_count(threads);
      dense_layer<float> l(s.in, s.units, activation::relu, s.max_batch);
      l.kernel() = normal_matrix<float>(s.in, s.units, 71, 0.2);
      l.bias() = normal_matrix<float>(1, s.units, 72, 0.1);
      const row_matrix<float> x = normal_matrix<float>(s.batch, s.in, 73);
      const auto y = l.forward(cview(x));
      const row_matrix<float> c = normal_matrix<float>(s.batch, s.units, 74);
      l.output_grad() = c;
      row_matrix<float> dx(s.batch, s.in);
      l.backward(cview(x), false, dx.data());
      const auto& w = l.kernel();
      for (idx r = 0; r < s.batch; ++r) {
        for (idx j = 0; j < s.units; ++j) {
          long double z = l.bias()(j);
          for (idx k = 0; k < s.in; ++k) z += static_cast<long double>(x(r, k)) * w(k, j);
          REQUIRE(close(y(r, j), std::max(0.0L, z), 1e-5, 1e-5));
        }
      }
      // dZ = c where the relu is on.
      row_matrix<long double> dz(s.batch, s.units);
      for (idx r = 0; r < s.batch; ++r) {
        for (idx j = 0; j < s.units; ++j) dz(r, j) = y(r, j) > 0 ? c(r, j) : 0.0f;
      }
      for (idx k = 0; k < s.in; ++k) {
        for (idx j = 0; j < s.units; ++j) {
          long double g = 0;
          for (idx r = 0; r < s.batch; ++r) g += x(r, k) * dz(r, j);
          REQUIRE(close(l.kernel_grad()(k, j), g, 1e-5, 1e-5));
        }
      }
      for (idx j = 0; j < s.units; ++j) {
        long double g = 0;
        for (idx r = 0; r < s.batch; ++r) g += dz(r, j);
        REQUIRE(close(l.bias_grad()(j), g, 1e-5, 1e-5));
      }
      for (idx r = 0; r < s.batch; ++r) {
        for (idx k = 0; k < s.in; ++k) {
          long double g = 0;
          for (idx j = 0; j < s.units; ++j) g += dz(r, j) * w(k, j);
          REQUIRE(close(dx(r, k), g, 1e-5, 1e-5));
        }
      }
    }
  }
  set_thread_count(before);
}
