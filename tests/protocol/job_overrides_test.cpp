#include "protocol/job_overrides.h"

#include <catch2/catch.hpp>

#include "os/mem_env.h"
#include "support/test_paths.h"

using namespace baton::protocol;
using json = nlohmann::json;

namespace {

json job() {
  return {
      {"name", "mnist"},
      {"data", {{"type", "synthetic"}, {"samples", 512}, {"features", 8}, {"seed", 3}}},
      {"model",
       {{"layers",
         {{{"units", 16}, {"activation", "relu"}}, {{"units", 1}, {"activation", "sigmoid"}}}}}},
      {"training", {{"batch_size", 64}, {"epochs", 2}}}};
}

baton::result<json> apply(const std::vector<std::string>& args) {
  std::vector<job_override> sets;
  for (const auto& a : args) {
    auto o = parse_override(a);
    if (!o) return o.error();
    sets.push_back(*o);
  }
  return apply_overrides(job(), sets);
}

}  // namespace

TEST_CASE("overrides are typed by the spec", "[unit][job_overrides]") {
  auto r = apply({"training.batch_size=128", "name=123", "training.optimizer.learning_rate=0.01",
                  "model.layers.0.units=32", "memory.soft_limit_mib=2048",
                  "worker.stall_timeout_ms=5000", "params.note=hello", "params.tags=[1,2]"});
  REQUIRE(r);
  CHECK((*r)["training"]["batch_size"] == 128);
  CHECK((*r)["name"] == "123");  // a string field keeps the text
  // Not in the document but a number in the spec's defaults: JSON.
  CHECK((*r)["training"]["optimizer"]["learning_rate"] == 0.01);
  CHECK((*r)["model"]["layers"][0]["units"] == 32);
  CHECK((*r)["memory"]["soft_limit_mib"] == 2048);  // the section is created
  CHECK((*r)["worker"]["stall_timeout_ms"] == 5000);
  CHECK((*r)["params"]["note"] == "hello");  // free-form: JSON if it parses, else text
  CHECK((*r)["params"]["tags"] == json{1, 2});
  CHECK(parse_job_spec(r->dump(), "/"));
}

TEST_CASE("bad overrides name the argument and what is wrong", "[unit][job_overrides]") {
  CHECK(apply({"training.batch_size"}).error().message ==
        "--set 'training.batch_size': expected PATH=VALUE, e.g. "
        "training.optimizer.learning_rate=0.01");
  CHECK(apply({"=3"}).error().message.find("expected PATH=VALUE") != std::string::npos);
  CHECK(apply({"training..epochs=3"}).error().message ==
        "--set 'training..epochs=3': empty segment in the path 'training..epochs'");
  CHECK(apply({"training.batch_size=abc"}).error().message ==
        "--set training.batch_size=abc: training.batch_size is a number; 'abc' is not JSON");
  CHECK(apply({"model.layers.7.units=3"}).error().message ==
        "--set model.layers.7.units=3: model.layers is an array of 2; '7' is not an index in it");
  CHECK(apply({"name.first=x"}).error().message ==
        "--set name.first=x: name is a string, not an object");
}

TEST_CASE("an override is validated like the field it replaces", "[unit][job_overrides]") {
  baton::os::mem_env e;
  // Absolute on every OS: loading makes the path absolute (Z:/jobs under wine).
  const auto dir = baton::test::abs_path("/jobs");
  const auto file = dir / "j.json";
  REQUIRE(e.create_dirs(dir));
  REQUIRE(baton::os::write_file_atomic(e, file, job().dump()));
  std::vector<job_override> sets = {*parse_override("training.batch_size=-3"),
                                    *parse_override("training.epochs=\"two\"")};
  auto spec = load_job_spec(e, file, sets);
  REQUIRE_FALSE(spec);
  CHECK_THAT(spec.error().message, Catch::Contains(file.string() + ": training.batch_size: "));
  CHECK_THAT(spec.error().message, Catch::Contains(file.string() + ": training.epochs: "));
  auto good = load_job_spec(e, file, {*parse_override("training.epochs=5")});
  REQUIRE(good);
  CHECK(good->training->epochs == 5);
  // Without overrides, the plain load: the same spec as the file.
  auto plain = load_job_spec(e, file, {});
  REQUIRE(plain);
  CHECK(plain->training->epochs == 2);
}
