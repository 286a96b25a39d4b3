#include "worker/sgd.h"

#include <catch2/catch.hpp>

#include "optimizer_harness.h"
#include "test_support.h"

using namespace baton::worker;
using namespace baton::worker::testing;

namespace {

// Keras 3 SGD in double: velocity = momentum * velocity - lr * g; w += velocity, or for Nesterov
// w += momentum * velocity - lr * g; with momentum 0, w -= lr * g.
std::vector<double> reference_sgd(double lr, double momentum, bool nesterov) {
  reference_net ref;
  auto w = ref.flat();
  std::vector<double> u(w.size(), 0.0);
  const auto xs = reference_batches_x();
  const auto ys = reference_batches_y();
  for (std::size_t b = 0; b < xs.size(); ++b) {
    const auto g = ref.gradient(xs[b], ys[b]);
    for (std::size_t i = 0; i < w.size(); ++i) {
      u[i] = momentum * u[i] - lr * g[i];
      *w[i] += nesterov ? momentum * u[i] - lr * g[i] : u[i];
    }
  }
  std::vector<double> out;
  for (double* p : w) out.push_back(*p);
  return out;
}

}  // namespace

TEST_CASE("SGD matches Keras's formulas after 3 steps", "[unit]") {
  struct variant {
    double momentum;
    bool nesterov;
  };
  for (const variant v : {variant{0.0, false}, variant{0.9, false}, variant{0.9, true}}) {
    CAPTURE(v.momentum, v.nesterov);
    protocol::optimizer_spec spec;
    spec.kind = protocol::optimizer_kind::sgd;
    spec.learning_rate = 0.1;
    spec.momentum = v.momentum;
    spec.nesterov = v.nesterov;
    auto m = reference_model();
    const auto start = flat_values(m);
    auto opt = make_optimizer(spec, m.parameters()).value();
    run_reference_batches(m, *opt);
    const auto want = reference_sgd(spec.learning_rate, v.momentum, v.nesterov);
    const auto got = flat_values(m);
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(close(got[i], want[i], 1e-6, 1e-7));
      CHECK(close(got[i] - start[i], want[i] - start[i], 1e-4, 1e-7));
    }
    CHECK(opt->iterations() == 3);
    const auto state = opt->state();
    if (v.momentum == 0.0) {
      CHECK(state.empty());  // as Keras: no momentum variables
    } else {
      REQUIRE(state.size() == 4);
      CHECK(state[0].name == "optimizer.layers.0.kernel.momentum");
      CHECK(state[3].name == "optimizer.layers.1.bias.momentum");
      CHECK(state[0].shape == std::vector<std::int64_t>{3, 4});
    }
  }
}
