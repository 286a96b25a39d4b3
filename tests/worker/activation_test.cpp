#include "worker/activation.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "test_support.h"
#include "worker/parallel.h"

using namespace baton::worker;
using namespace baton::worker::testing;

namespace {

const activation all_activations[] = {activation::relu, activation::sigmoid, activation::tanh,
                                      activation::linear, activation::softmax};

double reference(activation a, double z) {
  switch (a) {
    case activation::relu:
      return z > 0 ? z : 0;
    case activation::sigmoid:
      return 1 / (1 + std::exp(-z));
    case activation::tanh:
      return std::tanh(z);
    default:
      return z;
  }
}

}  // namespace

TEST_CASE("forward with bias matches the definitions", "[unit]") {
  for (activation a : all_activations) {
    CAPTURE(activation_name(a));
    row_matrix<double> z = normal_matrix<double>(5, 7, 1, 3.0);
    const row_vector<double> b = normal_matrix<double>(1, 7, 2);
    row_matrix<double> y = z;
    bias_activation_forward<double>(a, view(y), b.data());
    for (idx r = 0; r < 5; ++r) {
      double denom = 0, m = -1e300;
      for (idx j = 0; j < 7; ++j) m = std::max(m, z(r, j) + b(j));
      for (idx j = 0; j < 7; ++j) denom += std::exp(z(r, j) + b(j) - m);
      for (idx j = 0; j < 7; ++j) {
        const double pre = z(r, j) + b(j);
        const double want =
            a == activation::softmax ? std::exp(pre - m) / denom : reference(a, pre);
        CHECK(close(y(r, j), want, 1e-14, 1e-15));
      }
    }
  }
}

TEST_CASE("softmax is stable for huge logits and rows sum to one", "[unit]") {
  row_matrix<float> z(2, 3);
  z << 1000.f, 1001.f, 1002.f, -1000.f, 0.f, 1000.f;
  activation_forward<float>(activation::softmax, view(z));
  for (idx r = 0; r < 2; ++r) {
    CHECK(z.row(r).allFinite());
    CHECK(z.row(r).sum() == Approx(1.0f).epsilon(1e-6));
  }
  CHECK(z(0, 2) == Approx(1 / (1 + std::exp(-1.0) + std::exp(-2.0))).epsilon(1e-6));
}

TEST_CASE("float forward agrees with double (vectorised exp/logistic/tanh)", "[unit]") {
  for (activation a : all_activations) {
    CAPTURE(activation_name(a));
    row_matrix<double> zd = normal_matrix<double>(9, 33, 3, 4.0);
    row_matrix<float> zf = zd.cast<float>();
    activation_forward<double>(a, view(zd));
    activation_forward<float>(a, view(zf));
    for (idx i = 0; i < zd.size(); ++i) {
      CHECK(close(zf.data()[i], zd.data()[i], 2e-6, 1e-7));
    }
  }
}

TEST_CASE("activation backward passes agree with central differences", "[unit]") {
  for (activation a : all_activations) {
    CAPTURE(activation_name(a));
    row_matrix<double> z = normal_matrix<double>(3, 5, 4, 2.0);
    // relu has a kink at 0: keep the check points away from it.
    for (idx i = 0; i < z.size(); ++i) {
      if (std::abs(z.data()[i]) < 0.05) z.data()[i] = 0.3;
    }
    const row_matrix<double> c = normal_matrix<double>(3, 5, 5);
    // L = sum(c * act(z)): dL/dY = c.
    auto loss = [&] {
      row_matrix<double> y = z;
      activation_forward<double>(a, view(y));
      return (y.array() * c.array()).sum();
    };
    row_matrix<double> y = z;
    activation_forward<double>(a, view(y));
    row_matrix<double> grad = c;
    activation_backward<double>(a, cview(y), view(grad));
    for (idx i = 0; i < z.size(); ++i) {
      const double numeric = central_difference(loss, z.data()[i]);
      CHECK(close(grad.data()[i], numeric, 1e-7, 1e-9));
    }
  }
}

TEST_CASE("relu's gradient is zero where the unit is off", "[unit]") {
  row_matrix<float> y(1, 3);
  y << 0.f, 2.f, 0.f;
  row_matrix<float> g(1, 3);
  g << 5.f, 6.f, 7.f;
  activation_backward<float>(activation::relu, cview(y), view(g));
  CHECK(g(0, 0) == 0.f);
  CHECK(g(0, 1) == 6.f);
  CHECK(g(0, 2) == 0.f);
}

TEST_CASE("threaded activations equal the single-thread result bit for bit", "[unit]") {
  const int before = thread_count();
  for (activation a : all_activations) {
    CAPTURE(activation_name(a));
    const row_matrix<float> z = normal_matrix<float>(64, 500, 6);
    const row_vector<float> b = normal_matrix<float>(1, 500, 7);
    row_matrix<float> one = z, two = z;
    set_thread_count(1);
    bias_activation_forward<float>(a, view(one), b.data());
    set_thread_count(2);
    bias_activation_forward<float>(a, view(two), b.data());
    CHECK(one == two);
  }
  set_thread_count(before);
}
