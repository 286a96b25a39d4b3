#include "worker/loss.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "test_support.h"

using namespace baton::worker;
using namespace baton::worker::testing;

namespace {

struct loss_case {
  const char* name;
  loss_kind kind;
  activation last;
};

// Targets each loss is meant for: 0/1 labels for BCE, one-hot (or soft) rows for CCE.
row_matrix<double> targets(loss_kind kind, idx rows, idx cols) {
  rng r(11);
  row_matrix<double> y = row_matrix<double>::Zero(rows, cols);
  for (idx i = 0; i < rows; ++i) {
    if (kind == loss_kind::categorical_crossentropy) {
      y(i, static_cast<idx>(r.next() % static_cast<std::uint64_t>(cols))) = 1.0;
    } else {
      for (idx j = 0; j < cols; ++j) {
        y(i, j) = kind == loss_kind::mse ? r.normal() : static_cast<double>(r.next() % 2);
      }
    }
  }
  return y;
}

// Outputs the loss sees: logits, or probabilities strictly inside the clip range.
row_matrix<double> outputs(activation last, bool logits, idx rows, idx cols) {
  row_matrix<double> o = normal_matrix<double>(rows, cols, 12, 1.5);
  if (logits || last == activation::linear) return o;
  rng r(13);
  for (idx i = 0; i < o.size(); ++i) o.data()[i] = 0.05 + 0.9 * r.uniform();
  return o;
}

}  // namespace

TEST_CASE("every loss's gradient agrees with central differences", "[unit]") {
  const loss_case cases[] = {
      {"bce from logits", loss_kind::binary_crossentropy, activation::sigmoid},
      {"bce from probabilities", loss_kind::binary_crossentropy, activation::relu},
      {"cce from logits", loss_kind::categorical_crossentropy, activation::softmax},
      {"cce from probabilities", loss_kind::categorical_crossentropy, activation::sigmoid},
      {"mse", loss_kind::mse, activation::linear},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const loss_function<double> lf(c.kind, c.last);
    const idx rows = 4, cols = 3;
    row_matrix<double> out = outputs(c.last, lf.takes_logits(), rows, cols);
    const row_matrix<double> y = targets(c.kind, rows, cols);
    row_matrix<double> grad(rows, cols);
    const double mean = lf.forward_backward(cview(out), cview(y), view(grad));
    CHECK(mean == Approx(lf.sum(cview(out), cview(y)) / rows));
    auto loss = [&] { return lf.sum(cview(out), cview(y)) / rows; };
    for (idx i = 0; i < out.size(); ++i) {
      CHECK(close(grad.data()[i], central_difference(loss, out.data()[i]), 1e-7, 1e-10));
    }
  }
}

TEST_CASE("BCE from logits equals the probability formula and stays finite", "[unit]") {
  const loss_function<double> lf(loss_kind::binary_crossentropy, activation::sigmoid);
  REQUIRE(lf.takes_logits());
  row_matrix<double> z(3, 1), y(3, 1);
  z << 0.7, 100.0, -100.0;
  y << 1.0, 0.0, 0.0;
  const double p = 1 / (1 + std::exp(-0.7));
  row_matrix<double> z0 = z.topRows(1), y0 = y.topRows(1);
  CHECK(lf.sum(cview(z0), cview(y0)) == Approx(-std::log(p)).epsilon(1e-14));
  // z = 100 with y = 0: loss 100 (not inf); z = -100 with y = 0: ~e^-100.
  row_matrix<double> g(3, 1);
  const double mean = lf.forward_backward(cview(z), cview(y), view(g));
  CHECK(std::isfinite(mean));
  CHECK(mean == Approx((-std::log(p) + 100.0) / 3).epsilon(1e-12));
  CHECK(g(1, 0) == Approx(1.0 / 3));
}

TEST_CASE("BCE from probabilities clips like Keras", "[unit]") {
  const loss_function<float> lf(loss_kind::binary_crossentropy, activation::linear);
  REQUIRE_FALSE(lf.takes_logits());
  row_matrix<float> p(2, 1), y(2, 1), g(2, 1);
  p << 0.0f, 1.0f;
  y << 1.0f, 1.0f;
  const double mean = lf.forward_backward(cview(p), cview(y), view(g));
  // -log(1e-7) for the first row; the second is clipped to 1 - 1e-7 in float.
  CHECK(mean == Approx((-std::log(1e-7) - std::log(1.0 - 1.1920929e-7)) / 2).epsilon(1e-5));
  CHECK(g(0, 0) == 0.0f);  // outside the clip range the gradient is 0, as clip's gradient
}

TEST_CASE("CCE from logits uses the max-subtracted log-sum-exp", "[unit]") {
  const loss_function<float> lf(loss_kind::categorical_crossentropy, activation::softmax);
  row_matrix<float> z(1, 3), y(1, 3), g(1, 3);
  z << 1000.f, 0.f, -1000.f;
  y << 0.f, 1.f, 0.f;
  const double mean = lf.forward_backward(cview(z), cview(y), view(g));
  CHECK(mean == Approx(1000.0).epsilon(1e-6));
  CHECK(g(0, 0) == Approx(1.0f));
  CHECK(g(0, 1) == Approx(-1.0f));
}

TEST_CASE("MSE is the mean square over units and samples", "[unit]") {
  const loss_function<double> lf(loss_kind::mse, activation::linear);
  row_matrix<double> p(2, 2), y(2, 2), g(2, 2);
  p << 1, 2, 3, 4;
  y << 0, 0, 0, 0;
  CHECK(lf.forward_backward(cview(p), cview(y), view(g)) == Approx((1 + 4 + 9 + 16) / 4.0));
  CHECK(g(1, 1) == Approx(2 * 4 / 4.0));
}

TEST_CASE("accuracy follows Keras's binary and categorical rules", "[unit]") {
  SECTION("binary on logits: p > 0.5") {
    const loss_function<float> lf(loss_kind::binary_crossentropy, activation::sigmoid);
    row_matrix<float> z(4, 1), y(4, 1);
    z << 2.f, -1.f, 0.f, 0.5f;
    y << 1.f, 0.f, 1.f, 0.f;
    const auto c = lf.accuracy(cview(z), cview(y));
    CHECK(c.correct == 2);  // z = 0 gives p = 0.5, predicted 0
    CHECK(c.total == 4);
  }
  SECTION("categorical: argmax") {
    const loss_function<float> lf(loss_kind::categorical_crossentropy, activation::softmax);
    row_matrix<float> z(2, 3), y(2, 3);
    z << 0.1f, 3.f, 0.2f, 5.f, 1.f, 2.f;
    y << 0.f, 1.f, 0.f, 0.f, 0.f, 1.f;
    const auto c = lf.accuracy(cview(z), cview(y));
    CHECK(c.correct == 1);
    CHECK(c.total == 2);
  }
}
