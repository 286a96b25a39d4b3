#include "worker/adam.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "optimizer_harness.h"
#include "test_support.h"

using namespace baton::worker;
using namespace baton::worker::testing;

TEST_CASE("Adam matches the published formulas after 3 steps (Keras semantics)", "[unit]") {
  protocol::optimizer_spec spec;  // Keras defaults: 0.001, 0.9, 0.999, 1e-7
  spec.learning_rate = 0.01;      // larger steps make a wrong formula show sooner
  auto m = reference_model();
  const std::vector<float> start = flat_values(m);
  auto opt = make_optimizer(spec, m.parameters()).value();
  run_reference_batches(m, *opt);
  CHECK(opt->iterations() == 3);

  // Kingma & Ba 2015, Algorithm 1 with Keras's epsilon placement, in double. Keras casts its
  // hyperparameters to float32 before use: beta^t is float(beta)^t (for beta_2 = 0.999 that moves
  // 1 - beta_2^t by 1.3e-5 relative) and 1 - beta is a Python double rounded to float32.
  const double b1 = static_cast<float>(spec.beta_1), b2 = static_cast<float>(spec.beta_2);
  const double c1 = static_cast<float>(1 - spec.beta_1), c2 = static_cast<float>(1 - spec.beta_2);
  const double lr = static_cast<float>(spec.learning_rate);
  reference_net ref;
  auto w = ref.flat();
  std::vector<double> mom(w.size(), 0.0), vel(w.size(), 0.0);
  const auto xs = reference_batches_x();
  const auto ys = reference_batches_y();
  for (int t = 1; t <= 3; ++t) {
    const auto g = ref.gradient(xs[t - 1], ys[t - 1]);
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < w.size(); ++i) {
      mom[i] = (1 - c1) * mom[i] + c1 * g[i];
      vel[i] = (1 - c2) * vel[i] + c2 * g[i] * g[i];
      *w[i] -= alpha * mom[i] / (std::sqrt(vel[i]) + spec.epsilon);
    }
  }
  const std::vector<float> got = flat_values(m);
  REQUIRE(got.size() == w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    CAPTURE(i);
    CHECK(close(got[i], *w[i], 1e-6, 1e-7));
    // The movement itself (about 3 lr) must match too, not only the weights.
    CHECK(close(got[i] - start[i], *w[i] - start[i], 1e-3, 1e-7));
  }
  // First and second moments are exposed under their checkpoint names.
  const auto state = opt->state();
  REQUIRE(state.size() == 8);
  CHECK(state[0].name == "optimizer.layers.0.kernel.m");
  CHECK(state[1].name == "optimizer.layers.0.kernel.v");
  CHECK(state[3].name == "optimizer.layers.0.bias.v");
  CHECK(state[7].shape == std::vector<std::int64_t>{1});
  CHECK(close(state[6].value[0], mom[20], 1e-5, 1e-9));
  CHECK(close(state[7].value[0], vel[20], 1e-5, 1e-12));
}

TEST_CASE("Adam resumed from its state continues bit for bit", "[unit]") {
  const protocol::optimizer_spec spec;
  // Straight: 3 batches, then the first batch again.
  auto a = reference_model();
  auto opt_a = make_optimizer(spec, a.parameters()).value();
  run_reference_batches(a, *opt_a);
  run_reference_batches(a, *opt_a);

  auto b = reference_model();
  auto opt_b = make_optimizer(spec, b.parameters()).value();
  run_reference_batches(b, *opt_b);
  // "Checkpoint": copy weights, moments and iterations into a fresh model and optimizer.
  auto c = reference_model();
  auto opt_c = make_optimizer(spec, c.parameters()).value();
  auto pb = b.parameters(), pc = c.parameters();
  for (std::size_t k = 0; k < pb.size(); ++k) {
    std::copy(pb[k].value.begin(), pb[k].value.end(), pc[k].value.begin());
  }
  auto sb = opt_b->state(), sc = opt_c->state();
  REQUIRE(sb.size() == sc.size());
  for (std::size_t k = 0; k < sb.size(); ++k) {
    CHECK(sb[k].name == sc[k].name);
    std::copy(sb[k].value.begin(), sb[k].value.end(), sc[k].value.begin());
  }
  opt_c->set_iterations(opt_b->iterations());
  run_reference_batches(c, *opt_c);
  CHECK(flat_values(a) == flat_values(c));
}
