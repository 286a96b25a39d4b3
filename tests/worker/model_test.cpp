#include "worker/model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "test_support.h"
#include "worker/optimizer.h"
#include "worker/parallel.h"

using namespace baton::worker;
using namespace baton::worker::testing;

namespace {

protocol::model_spec spec_of(std::vector<protocol::layer_spec> layers) {
  protocol::model_spec s;
  s.layers = std::move(layers);
  return s;
}

// The seed workload in miniature: X ~ N(0, 1), y = (row sum > 0).
void rowsum_data(idx rows, idx cols, std::uint64_t seed, row_matrix<float>& x,
                 row_matrix<float>& y) {
  x = normal_matrix<float>(rows, cols, seed);
  y.resize(rows, 1);
  for (idx r = 0; r < rows; ++r) y(r, 0) = x.row(r).sum() > 0 ? 1.0f : 0.0f;
}

}  // namespace

TEST_CASE("model::create names the bad field", "[unit]") {
  using Catch::Matchers::Contains;
  auto bad_units = model<float>::create(spec_of({{4, activation::relu}, {0, activation::sigmoid}}),
                                        3, loss_kind::binary_crossentropy, 32);
  REQUIRE_FALSE(bad_units);
  CHECK_THAT(bad_units.error().message, Contains("model.layers[1].units"));
  auto no_layers = model<float>::create(spec_of({}), 3, loss_kind::mse, 32);
  REQUIRE_FALSE(no_layers);
  CHECK_THAT(no_layers.error().message, Contains("model.layers"));
  auto bad_batch = model<float>::create(spec_of({{1, activation::linear}}), 3, loss_kind::mse, 0);
  REQUIRE_FALSE(bad_batch);
  CHECK_THAT(bad_batch.error().message, Contains("training.batch_size"));
}

TEST_CASE("check_data_shape reports mismatched data", "[unit]") {
  auto m = model<float>::create(spec_of({{4, activation::relu}, {2, activation::softmax}}), 3,
                                loss_kind::categorical_crossentropy, 8)
               .value();
  CHECK(m.check_data_shape(3, 2));
  auto features = m.check_data_shape(5, 2);
  REQUIRE_FALSE(features);
  CHECK_THAT(features.error().message, Catch::Matchers::Contains("5 feature columns"));
  REQUIRE_FALSE(m.check_data_shape(3, 1));
}

TEST_CASE("glorot init: bounded, zero biases, a pure function of the seed", "[unit]") {
  const auto spec = spec_of({{200, activation::relu}, {1, activation::sigmoid}});
  auto a = model<float>::create(spec, 100, loss_kind::binary_crossentropy, 32).value();
  auto b = model<float>::create(spec, 100, loss_kind::binary_crossentropy, 32).value();
  auto c = model<float>::create(spec, 100, loss_kind::binary_crossentropy, 32).value();
  a.init_glorot(5);
  b.init_glorot(5);
  c.init_glorot(6);
  auto pa = a.parameters(), pb = b.parameters(), pc = c.parameters();
  REQUIRE(pa.size() == 4);
  CHECK(pa[0].name == "layers.0.kernel");
  CHECK(pa[0].shape == std::vector<std::int64_t>{100, 200});
  CHECK(pa[3].name == "layers.1.bias");
  CHECK(a.parameter_count() == 100 * 200 + 200 + 200 + 1);
  const double limit = std::sqrt(6.0 / 300.0);
  double sum2 = 0;
  for (float w : pa[0].value) {
    REQUIRE(std::abs(w) <= limit);
    sum2 += static_cast<double>(w) * w;
  }
  // U(-l, l) has variance l^2 / 3.
  CHECK(sum2 / pa[0].value.size() == Approx(limit * limit / 3).epsilon(0.03));
  for (float v : pa[1].value) CHECK(v == 0.0f);
  CHECK(std::equal(pa[0].value.begin(), pa[0].value.end(), pb[0].value.begin()));
  CHECK_FALSE(std::equal(pa[0].value.begin(), pa[0].value.end(), pc[0].value.begin()));
}

TEST_CASE("whole-model gradients agree with central differences", "[unit]") {
  struct net {
    const char* name;
    std::vector<protocol::layer_spec> layers;
    loss_kind loss;
  };
  const net nets[] = {
      {"relu-relu-sigmoid bce",
       {{5, activation::relu}, {4, activation::relu}, {1, activation::sigmoid}},
       loss_kind::binary_crossentropy},
      {"tanh-softmax cce",
       {{4, activation::tanh}, {3, activation::softmax}},
       loss_kind::categorical_crossentropy},
      {"sigmoid-linear mse", {{4, activation::sigmoid}, {2, activation::linear}}, loss_kind::mse},
      // A hidden softmax: its derivative needs whole rows, the one non-elementwise lower layer.
      {"relu-softmax-linear mse",
       {{5, activation::relu}, {4, activation::softmax}, {2, activation::linear}},
       loss_kind::mse},
      // The first layer keeps no dZ^T (input_gradient::not_needed): as a softmax lower layer,
      // and as the only layer, whose dL/dZ comes straight from the loss.
      {"softmax-linear mse", {{4, activation::softmax}, {2, activation::linear}}, loss_kind::mse},
      {"sigmoid bce", {{1, activation::sigmoid}}, loss_kind::binary_crossentropy},
  };
  for (const auto& n : nets) {
    CAPTURE(n.name);
    auto m = model<double>::create(spec_of(n.layers), 3, n.loss, 8).value();
    m.init_glorot(31);
    // Non-zero biases so every bias path is exercised.
    for (auto& p : m.parameters()) {
      if (p.shape.size() == 1) {
        rng r(32);
        for (auto& v : p.value) v = 0.1 * r.normal();
      }
    }
    const idx rows = 5;  // a short batch in a model built for 8
    const row_matrix<double> x = normal_matrix<double>(rows, 3, 33);
    row_matrix<double> y = row_matrix<double>::Zero(rows, m.outputs());
    for (idx r = 0; r < rows; ++r) {
      if (n.loss == loss_kind::categorical_crossentropy) {
        y(r, r % m.outputs()) = 1;
      } else {
        for (idx j = 0; j < m.outputs(); ++j) y(r, j) = (r + j) % 2;
      }
    }
    const double loss = m.train_step(cview(x), cview(y));
    CHECK(loss == Approx(m.evaluate(cview(x), cview(y)).loss).epsilon(1e-12));
    m.train_step(cview(x), cview(y));
    auto params = m.parameters();
    std::vector<std::vector<double>> analytic;
    for (auto& p : params) analytic.emplace_back(p.grad.begin(), p.grad.end());
    auto loss_fn = [&] { return m.evaluate(cview(x), cview(y)).loss; };
    for (std::size_t k = 0; k < params.size(); ++k) {
      CAPTURE(params[k].name);
      for (std::size_t i = 0; i < params[k].value.size(); ++i) {
        CAPTURE(i);
        CHECK(close(analytic[k][i], central_difference(loss_fn, params[k].value[i]), 1e-6, 1e-9));
      }
    }
  }
}

TEST_CASE("evaluate averages over all rows in max-batch chunks", "[unit]") {
  auto m = model<float>::create(spec_of({{6, activation::relu}, {1, activation::sigmoid}}), 4,
                                loss_kind::binary_crossentropy, 8)
               .value();
  m.init_glorot(41);
  row_matrix<float> x, y;
  rowsum_data(21, 4, 42, x, y);  // chunks of 8, 8, 5
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (idx r0 = 0; r0 < 21; r0 += 1) {
    const_matrix_map<float> xr(x.data() + r0 * 4, 1, 4), yr(y.data() + r0, 1, 1);
    const auto e = m.evaluate(xr, yr);
    loss_sum += e.loss;
    correct += e.accuracy == 1.0 ? 1 : 0;
  }
  const auto all = m.evaluate(cview(x), cview(y));
  CHECK(all.samples == 21);
  CHECK(all.loss == Approx(loss_sum / 21).epsilon(1e-6));
  CHECK(all.accuracy == Approx(correct / 21.0));
  const auto p = m.predict_batch({x.data(), 8, 4});
  for (idx r = 0; r < 8; ++r) CHECK((p(r, 0) > 0.0f && p(r, 0) < 1.0f));
}

TEST_CASE("one epoch learns the row-sum problem", "[unit]") {
  // The seed workload narrowed to 20 features and 64 units: same 157 steps of 32 per epoch.
  row_matrix<float> x, y;
  rowsum_data(5000, 20, 51, x, y);
  auto m = model<float>::create(
               spec_of({{64, activation::relu}, {64, activation::relu}, {1, activation::sigmoid}}),
               20, loss_kind::binary_crossentropy, 32)
               .value();
  m.init_glorot(52);
  auto opt = make_optimizer({}, m.parameters()).value();
  const auto before = m.evaluate(cview(x), cview(y));
  for (idx r0 = 0; r0 < 5000; r0 += 32) {
    const idx n = std::min<idx>(32, 5000 - r0);
    const double loss = m.train_step({x.data() + r0 * 20, n, 20}, {y.data() + r0, n, 1});
    REQUIRE(std::isfinite(loss));
    opt->step();
  }
  const auto after = m.evaluate(cview(x), cview(y));
  INFO("loss " << before.loss << " -> " << after.loss << ", accuracy " << before.accuracy << " -> "
               << after.accuracy);
  CHECK(after.loss < before.loss);
  CHECK(after.accuracy > 0.9);
}

TEST_CASE("same seed, same steps: bit-identical parameters at 2 threads", "[unit]") {
  const int before = thread_count();
  set_thread_count(2);
  row_matrix<float> x, y;
  rowsum_data(200, 100, 61, x, y);
  auto run = [&] {
    auto m =
        model<float>::create(
            spec_of({{256, activation::relu}, {256, activation::relu}, {1, activation::sigmoid}}),
            100, loss_kind::binary_crossentropy, 32)
            .value();
    m.init_glorot(62);
    auto opt = make_optimizer({}, m.parameters()).value();
    std::vector<double> losses;
    for (idx r0 = 0; r0 < 200; r0 += 32) {
      const idx n = std::min<idx>(32, 200 - r0);
      losses.push_back(m.train_step({x.data() + r0 * 100, n, 100}, {y.data() + r0, n, 1}));
      opt->step();
    }
    std::vector<float> flat;
    for (auto& p : m.parameters()) flat.insert(flat.end(), p.value.begin(), p.value.end());
    for (auto& s : opt->state()) flat.insert(flat.end(), s.value.begin(), s.value.end());
    return std::make_pair(flat, losses);
  };
  const auto a = run();
  const auto b = run();
  CHECK(a.second == b.second);
  REQUIRE(a.first.size() == b.first.size());
  CHECK(std::memcmp(a.first.data(), b.first.data(), a.first.size() * sizeof(float)) == 0);
  set_thread_count(before);
}

TEST_CASE("fused train_step(x, y, opt) equals train_step then step(), bit for bit", "[unit]") {
  const int before = thread_count();
  row_matrix<float> x, y;
  rowsum_data(200, 100, 81, x, y);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_thread_count(threads);
    for (const auto kind : {protocol::optimizer_kind::adam, protocol::optimizer_kind::sgd}) {
      protocol::optimizer_spec spec;
      spec.kind = kind;
      spec.momentum = 0.9;
      auto run = [&](bool fused) {
        auto m = model<float>::create(spec_of({{150, activation::relu},
                                               {70, activation::tanh},
                                               {1, activation::sigmoid}}),
                                      100, loss_kind::binary_crossentropy, 32)
                     .value();
        m.init_glorot(82);
        auto opt = make_optimizer(spec, m.parameters()).value();
        std::vector<double> losses;
        for (idx r0 = 0; r0 < 200; r0 += 32) {
          const idx n = std::min<idx>(32, 200 - r0);
          const_matrix_map<float> xb(x.data() + r0 * 100, n, 100), yb(y.data() + r0, n, 1);
          if (fused) {
            losses.push_back(m.train_step(xb, yb, *opt));
          } else {
            losses.push_back(m.train_step(xb, yb));
            opt->step();
          }
        }
        std::vector<float> flat;
        for (auto& p : m.parameters()) flat.insert(flat.end(), p.value.begin(), p.value.end());
        for (auto& s : opt->state()) flat.insert(flat.end(), s.value.begin(), s.value.end());
        return std::make_tuple(flat, losses, opt->iterations());
      };
      const auto split = run(false);
      const auto fused = run(true);
      CHECK(std::get<1>(split) == std::get<1>(fused));
      CHECK(std::get<2>(split) == std::get<2>(fused));
      REQUIRE(std::get<0>(split).size() == std::get<0>(fused).size());
      CHECK(std::memcmp(std::get<0>(split).data(), std::get<0>(fused).data(),
                        std::get<0>(split).size() * sizeof(float)) == 0);
    }
  }
  set_thread_count(before);
}

TEST_CASE("fused train_step with a foreign optimizer falls back to the plain step", "[unit]") {
  row_matrix<float> x, y;
  rowsum_data(8, 4, 91, x, y);
  const auto spec = spec_of({{3, activation::relu}, {1, activation::sigmoid}});
  auto a = model<float>::create(spec, 4, loss_kind::binary_crossentropy, 8).value();
  auto b = model<float>::create(spec, 4, loss_kind::binary_crossentropy, 8).value();
  a.init_glorot(92);
  b.init_glorot(92);
  // b's gradients are unspecified before its first train_step: zeroed, b's weights stay put.
  for (auto& p : b.parameters()) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  auto opt_b = make_optimizer({}, b.parameters()).value();
  const auto before = b.parameters()[0].value[0];
  // opt_b is bound to b, not a: a's step must still count as one update of opt_b's own tensors.
  a.train_step(cview(x), cview(y), *opt_b);
  CHECK(opt_b->iterations() == 1);
  CHECK(b.parameters()[0].value[0] == before);  // b's gradients were still zero
}
