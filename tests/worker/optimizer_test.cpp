#include "worker/optimizer.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "optimizer_harness.h"
#include "worker/adam.h"
#include "worker/sgd.h"

using namespace baton::worker;
using namespace baton::worker::testing;

TEST_CASE("make_optimizer builds the configured kind", "[unit]") {
  auto m = reference_model();
  protocol::optimizer_spec spec;
  auto a = make_optimizer(spec, m.parameters());
  REQUIRE(a);
  CHECK(dynamic_cast<adam*>(a->get()) != nullptr);
  spec.kind = protocol::optimizer_kind::sgd;
  auto s = make_optimizer(spec, m.parameters());
  REQUIRE(s);
  CHECK(dynamic_cast<sgd*>(s->get()) != nullptr);
}

TEST_CASE("make_optimizer rejects bad hyperparameters by field", "[unit]") {
  auto m = reference_model();
  const auto error_of = [&](auto edit) {
    protocol::optimizer_spec spec;
    edit(spec);
    auto r = make_optimizer(spec, m.parameters());
    REQUIRE_FALSE(r);
    return r.error().message;
  };
  using Catch::Matchers::StartsWith;
  CHECK_THAT(error_of([](auto& s) { s.learning_rate = -1; }),
             StartsWith("training.optimizer.learning_rate:"));
  CHECK_THAT(error_of([](auto& s) { s.beta_1 = 1.0; }), StartsWith("training.optimizer.beta_1:"));
  CHECK_THAT(error_of([](auto& s) { s.beta_2 = -0.1; }), StartsWith("training.optimizer.beta_2:"));
  CHECK_THAT(error_of([](auto& s) { s.epsilon = -1; }), StartsWith("training.optimizer.epsilon:"));
  CHECK_THAT(error_of([](auto& s) {
               s.kind = protocol::optimizer_kind::sgd;
               s.momentum = 1.5;
             }),
             StartsWith("training.optimizer.momentum:"));
}

TEST_CASE("a zero gradient leaves Adam's weights unchanged", "[unit]") {
  auto m = reference_model();
  const auto before = flat_values(m);
  // A new model's gradients are unspecified until its first train_step: zero them here.
  for (auto& p : m.parameters()) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  auto opt = make_optimizer({}, m.parameters()).value();
  opt->step();
  CHECK(flat_values(m) == before);
  CHECK(opt->iterations() == 1);
}
