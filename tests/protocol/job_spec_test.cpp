#include "protocol/job_spec.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <string>

#include "os/env.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;
using baton::protocol::job_spec;
using baton::protocol::parse_job_spec;
using json = nlohmann::json;

namespace {

const fs::path base = "/jobs/base";

// The smallest valid job: every other field takes its default.
json minimal() {
  return json::parse(R"({
    "name": "t",
    "data": {"type": "synthetic", "samples": 100, "features": 4},
    "model": {"layers": [{"units": 8, "activation": "relu"}, {"units": 1, "activation": "sigmoid"}]}
  })");
}

using mutation = std::function<void(json&)>;
mutation set(const std::string& pointer, json value) {
  return [pointer, value](json& j) { j[json::json_pointer(pointer)] = value; };
}
mutation erase(const std::string& pointer) {
  return [pointer](json& j) {
    const json::json_pointer p(pointer);
    j[p.parent_pointer()].erase(p.back());
  };
}
mutation both(mutation a, mutation b) {
  return [a, b](json& j) {
    a(j);
    b(j);
  };
}

std::string error_of(const json& doc) {
  auto r = parse_job_spec(doc.dump(), base);
  return r ? std::string("<valid>") : r.error().message;
}

fs::path scratch_dir(const std::string& name) {
  return baton::test::fresh_scratch_dir("baton-job-spec-test-" + name);
}

void write(const fs::path& p, const std::string& text) {
  REQUIRE(baton::os::write_file_atomic(baton::os::env::default_env(), p, text));
}

}  // namespace

TEST_CASE("the minimal job is valid", "[unit][job_spec]") {
  CHECK(error_of(minimal()) == "<valid>");
}

TEST_CASE("every invalid field is reported with its path and expectation", "[unit][job_spec]") {
  struct row {
    mutation change;
    std::string message;
  };
  // clang-format off
  const std::vector<row> rows = {
    // document shape and unknown keys
    {[](json& j) { j = json::array(); }, "(document): expected an object, got []"},
    {set("/trainig", json::object()), "trainig: unknown key; did you mean \"training\"?"},
    {set("/training/optimzer", "adam"), "training.optimzer: unknown key; did you mean \"optimizer\"?"},
    {set("/zzz", 1), "zzz: unknown key; expected one of name, data, model, training, shard, memory, restart, checkpoints, worker, debug, params"},
    {set("/model/layers/0/unit", 3), "model.layers[0].unit: unknown key; did you mean \"units\"?"},
    {set("/data/path", "x.csv"), "data.path: unknown key; expected one of type, samples, features, seed"},
    // name
    {erase("/name"), "name: missing, expected a job name"},
    {set("/name", 3), "name: expected a job name (a string), got 3"},
    {set("/name", ""), "name: expected 1 to 64 characters, got 0"},
    {set("/name", std::string(65, 'a')), "name: expected 1 to 64 characters, got 65"},
    {set("/name", "a/b"), "name: character '/' not allowed in \"a/b\"; a job name is a folder name: use A-Z a-z 0-9 . _ -"},
    {set("/name", "a b"), "name: character ' ' not allowed in \"a b\"; a job name is a folder name: use A-Z a-z 0-9 . _ -"},
    {set("/name", ".."), "name: must not start with '.', got \"..\""},
    {set("/name", ".hidden"), "name: must not start with '.', got \".hidden\""},
    {set("/name", "run."), "name: must not end with '.', got \"run.\""},
    {set("/name", "CON"), "name: reserved device name on Windows: \"CON\""},
    {set("/name", "nul.txt"), "name: reserved device name on Windows: \"nul.txt\""},
    // data
    {erase("/data"), "data: missing, expected an object with \"type\" (synthetic, csv, npy)"},
    {set("/data", "synthetic"), "data: expected an object, got \"synthetic\""},
    {erase("/data/type"), "data.type: missing, expected one of synthetic, csv, npy"},
    {set("/data/type", "parquet"), "data.type: unknown data type \"parquet\"; expected one of synthetic, csv, npy"},
    {set("/data/type", "cvs"), "data.type: unknown data type \"cvs\"; did you mean \"csv\"?"},
    {set("/data/type", 1), "data.type: expected data type name (one of synthetic, csv, npy), got 1"},
    {set("/data/samples", 0), "data.samples: expected a positive integer, got 0"},
    {set("/data/samples", 10.5), "data.samples: expected a positive integer, got 10.5"},
    {set("/data/features", -1), "data.features: expected a positive integer, got -1"},
    {set("/data/seed", -1), "data.seed: expected a non-negative integer, got -1"},
    {set("/data", json{{"type", "csv"}}), "data.path: missing, expected a file path"},
    {set("/data", json{{"type", "csv"}, {"path", ""}}), "data.path: expected a file path, got \"\""},
    {set("/data", json{{"type", "csv"}, {"path", "a.csv"}, {"label_column", 1.5}}), "data.label_column: expected a column name or a 0-based column index, got 1.5"},
    {set("/data", json{{"type", "csv"}, {"path", "a.csv"}, {"label_column", "y"}, {"header", false}}), "data.label_column: a column name needs data.header true"},
    {set("/data", json{{"type", "csv"}, {"path", "a.csv"}, {"header", "yes"}}), "data.header: expected true or false, got \"yes\""},
    {set("/data", json{{"type", "npy"}, {"features", "x.npy"}}), "data.labels: missing, expected a file path"},
    // model
    {erase("/model"), "model: missing, expected an object with \"layers\""},
    {erase("/model/layers"), "model.layers: missing, expected a non-empty array of layers"},
    {set("/model/layers", json::array()), "model.layers: expected a non-empty array of layers, got []"},
    {set("/model/layers/0", 8), "model.layers[0]: expected an object, got 8"},
    {erase("/model/layers/0/units"), "model.layers[0].units: missing, expected a positive integer"},
    {set("/model/layers/0/units", 0), "model.layers[0].units: expected a positive integer, got 0"},
    {set("/model/layers/0/units", 8.5), "model.layers[0].units: expected a positive integer, got 8.5"},
    {set("/model/layers/1/activation", "sigmod"), "model.layers[1].activation: unknown activation \"sigmod\"; did you mean \"sigmoid\"?"},
    {set("/model/layers/0/activation", "gelu"), "model.layers[0].activation: unknown activation \"gelu\"; did you mean \"relu\"?"},
    {set("/model/layers/0/activation", "swish"), "model.layers[0].activation: unknown activation \"swish\"; expected one of relu, sigmoid, tanh, linear, softmax"},
    {set("/model/initial_weights", 5), "model.initial_weights: expected a file path, got 5"},
    // training
    {set("/training", 1), "training: expected an object, got 1"},
    {set("/training/batch_size", -3), "training.batch_size: expected a positive integer, got -3"},
    {set("/training/batch_size", 0), "training.batch_size: expected a positive integer, got 0"},
    {set("/training/batch_size", 32.5), "training.batch_size: expected a positive integer, got 32.5"},
    {set("/training/batch_size", "32"), "training.batch_size: expected a positive integer, got \"32\""},
    {set("/training/batch_size", nullptr), "training.batch_size: expected a positive integer, got null"},
    {set("/training/batch_size", 18446744073709551615ull), "training.batch_size: expected a positive integer no larger than 9223372036854775807, got 18446744073709551615"},
    {set("/training/epochs", 0), "training.epochs: expected a positive integer, got 0"},
    {set("/training/shuffle", "yes"), "training.shuffle: expected true or false, got \"yes\""},
    {set("/training/seed", -1), "training.seed: expected a non-negative integer, got -1"},
    {set("/training/threads", -1), "training.threads: expected a non-negative integer, got -1"},
    {set("/training/threads", 3000000000LL), "training.threads: expected a non-negative integer no larger than 2147483647, got 3000000000"},
    {set("/training/validation_split", 1.0), "training.validation_split: expected a number in [0, 1), got 1.0"},
    {set("/training/validation_split", -0.1), "training.validation_split: expected a number in [0, 1), got -0.1"},
    {set("/training/validation_split", 0.995), "training.validation_split: leaves no training samples of data.samples 100"},
    {set("/training/loss", "mse2"), "training.loss: unknown loss \"mse2\"; did you mean \"mse\"?"},
    {set("/training/loss", "hinge"), "training.loss: unknown loss \"hinge\"; expected one of binary_crossentropy, categorical_crossentropy, mse"},
    {set("/training/optimizer", "adamw"), "training.optimizer: unknown optimizer \"adamw\"; did you mean \"adam\"?"},
    {set("/training/optimizer", 3), "training.optimizer: expected an optimizer name or object, got 3"},
    {set("/training/optimizer", json::object()), "training.optimizer.type: missing, expected one of adam, sgd"},
    {set("/training/optimizer", json{{"type", "adam"}, {"learning_rate", 0}}), "training.optimizer.learning_rate: expected a positive number, got 0"},
    {set("/training/optimizer", json{{"type", "adam"}, {"beta_1", 1.0}}), "training.optimizer.beta_1: expected a number in [0, 1), got 1.0"},
    {set("/training/optimizer", json{{"type", "adam"}, {"beta_2", -0.5}}), "training.optimizer.beta_2: expected a number in [0, 1), got -0.5"},
    {set("/training/optimizer", json{{"type", "adam"}, {"epsilon", 0}}), "training.optimizer.epsilon: expected a positive number, got 0"},
    {set("/training/optimizer", json{{"type", "adam"}, {"momentum", 0.9}}), "training.optimizer.momentum: unknown key; expected one of type, learning_rate, beta_1, beta_2, epsilon"},
    {set("/training/optimizer", json{{"type", "sgd"}, {"momentum", 1.0}}), "training.optimizer.momentum: expected a number in [0, 1), got 1.0"},
    {set("/training/optimizer", json{{"type", "sgd"}, {"nesterov", 1}}), "training.optimizer.nesterov: expected true or false, got 1"},
    {set("/training/optimizer", json{{"type", "sgd"}, {"learning_rate", -0.1}}), "training.optimizer.learning_rate: expected a positive number, got -0.1"},
    // loss against the last layer
    {set("/model/layers/1", json{{"units", 3}, {"activation", "softmax"}}), "training.loss: binary_crossentropy needs a last layer with units 1 and activation sigmoid, got units 3 and activation softmax (model.layers[1]); training.loss defaults to binary_crossentropy"},
    {both(set("/training/loss", "binary_crossentropy"), set("/model/layers/1/activation", "relu")), "training.loss: binary_crossentropy needs a last layer with units 1 and activation sigmoid, got units 1 and activation relu (model.layers[1])"},
    {set("/training/loss", "categorical_crossentropy"), "training.loss: categorical_crossentropy needs a last layer with activation softmax and units >= 2, got units 1 and activation sigmoid (model.layers[1])"},
    {both(set("/training/loss", "categorical_crossentropy"), set("/model/layers/1/activation", "softmax")), "training.loss: categorical_crossentropy needs a last layer with activation softmax and units >= 2, got units 1 and activation softmax (model.layers[1])"},
    // shard
    {set("/shard", json::object()), "shard: expected exactly one of \"epochs\" or \"steps\", got neither"},
    {set("/shard", json{{"epochs", 1}, {"steps", 5}}), "shard: expected exactly one of \"epochs\" or \"steps\", got both"},
    {set("/shard", json{{"steps", 0}}), "shard.steps: expected a positive integer, got 0"},
    {set("/shard", json{{"epochs", 1.5}}), "shard.epochs: expected a positive integer, got 1.5"},
    // memory
    {set("/memory/soft_limit_mib", 0), "memory.soft_limit_mib: expected a positive integer, got 0"},
    {set("/memory/hard_limit_mib", "2G"), "memory.hard_limit_mib: expected a positive integer, got \"2G\""},
    {set("/memory/poll_ms", 0), "memory.poll_ms: expected a positive integer, got 0"},
    {both(set("/memory/soft_limit_mib", 3000), set("/memory/hard_limit_mib", 2048)), "memory.soft_limit_mib: must not exceed memory.hard_limit_mib, got 3000 > 2048"},
    // restart
    {set("/restart/max_failures", 0), "restart.max_failures: expected a positive integer, got 0"},
    {set("/restart/max_failures", 3000000000LL), "restart.max_failures: expected a positive integer no larger than 2147483647, got 3000000000"},
    {set("/restart/backoff_initial_ms", 0), "restart.backoff_initial_ms: expected a positive integer, got 0"},
    {set("/restart/backoff_max_ms", -5), "restart.backoff_max_ms: expected a positive integer, got -5"},
    {set("/restart/backoff_multiplier", 0.5), "restart.backoff_multiplier: expected a number >= 1, got 0.5"},
    {both(set("/restart/backoff_initial_ms", 5000), set("/restart/backoff_max_ms", 1000)), "restart.backoff_initial_ms: must not exceed restart.backoff_max_ms, got 5000 > 1000"},
    {set("/restart/backoff_initial_ms", 70000), "restart.backoff_initial_ms: must not exceed restart.backoff_max_ms, got 70000 > 60000"},
    // checkpoints
    {set("/checkpoints/keep", 0), "checkpoints.keep: expected a positive integer, got 0"},
    {set("/checkpoints/kep", 1), "checkpoints.kep: unknown key; did you mean \"keep\"?"},
    // worker
    {set("/worker/command", json::array()), "worker.command: expected null or a non-empty array of strings (argv), got []"},
    {set("/worker/command", "python train.py"), "worker.command: expected null or a non-empty array of strings (argv), got \"python train.py\""},
    {set("/worker/command", json{"python", 1}), "worker.command: expected null or a non-empty array of strings (argv), got an array"},
    {set("/worker/command", json{""}), "worker.command[0]: expected the program to run, got \"\""},
    {set("/worker/stall_timeout_ms", 0), "worker.stall_timeout_ms: expected a positive integer, got 0"},
    {set("/worker/stop_grace_ms", -1), "worker.stop_grace_ms: expected a non-negative integer, got -1"},
#ifndef _WIN32  // Windows refuses worker.preload whole (below)
    {set("/worker/preload", "torch"), "worker.preload: expected an array of module names ([\"torch\"]), got \"torch\""},
    {set("/worker/preload", json{"torch", 7}), "worker.preload[1]: expected a module name, got 7"},
    {set("/worker/preload", json{"torch..nn"}), "worker.preload[0]: a module name is dotted identifiers (\"torch\", \"torch.nn\"), at most 200 bytes"},
    {set("/worker/preload", json{"os; import x"}), "worker.preload[0]: a module name is dotted identifiers (\"torch\", \"torch.nn\"), at most 200 bytes"},
    {set("/worker/preload", json{"9lives"}), "worker.preload[0]: a module name is dotted identifiers (\"torch\", \"torch.nn\"), at most 200 bytes"},
    {set("/worker/preload", json(std::vector<std::string>(65, "m"))), "worker.preload: at most 64 modules, got 65"},
    {set("/worker/preload", json{"torch"}), "worker.preload: needs worker.command [python, script, args...]: the fork server is a Python parent that runs the script in each shard"},
    {both(set("/worker/preload", json{"torch"}), set("/worker/command", json{"python3"})), "worker.preload: needs worker.command [python, script, args...] with the script second (the fork server runs it as __main__; interpreter options go in worker.env, e.g. PYTHONUNBUFFERED), got no script"},
    {both(set("/worker/preload", json{"torch"}), set("/worker/command", json{"python3", "-u", "t.py"})), "worker.preload: needs worker.command [python, script, args...] with the script second (the fork server runs it as __main__; interpreter options go in worker.env, e.g. PYTHONUNBUFFERED), got \"-u\""},
    {set("/worker/env", "CUDA_VISIBLE_DEVICES=1"), "worker.env: expected an object of NAME: \"value\" strings, got \"CUDA_VISIBLE_DEVICES=1\""},
    {set("/worker/env", json{{"1GPU", "x"}}), "worker.env.1GPU: a variable name is letters, digits and _, not starting with a digit"},
    {set("/worker/env", json{{"A-B", "x"}}), "worker.env.A-B: a variable name is letters, digits and _, not starting with a digit"},
    {set("/worker/env", json{{"BATON_JOB_ID", "x"}}), "worker.env.BATON_JOB_ID: BATON_* variables are set by baton for the worker protocol"},
    {set("/worker/env", json{{"OMP_NUM_THREADS", 4}}), "worker.env.OMP_NUM_THREADS: expected a string, got 4"},
    {set("/worker/env", json{{"X", std::string("a\0b", 3)}}), "worker.env.X: a value cannot hold a NUL byte"},
#endif
    // debug
    {set("/debug/leak_mib_per_step", -1), "debug.leak_mib_per_step: expected a non-negative number, got -1"},
    {set("/debug/crash_at_step", -1), "debug.crash_at_step: expected a non-negative integer, got -1"},
    {set("/debug/hang_at_step", "soon"), "debug.hang_at_step: expected a non-negative integer, got \"soon\""},
  };
  // clang-format on
  for (const auto& r : rows) {
    json doc = minimal();
    r.change(doc);
    INFO(doc.dump());
    CHECK(error_of(doc) == r.message);
  }
}

TEST_CASE("all errors are reported, one per line", "[unit][job_spec]") {
  json doc = minimal();
  doc["trainig"] = json::object();
  doc["training"]["batch_size"] = -3;
  doc["training"]["epochs"] = 0;
  doc["model"]["layers"][0]["units"] = 0;
  doc["memory"]["poll_ms"] = "fast";
  CHECK(error_of(doc) ==
        "trainig: unknown key; did you mean \"training\"?\n"
        "model.layers[0].units: expected a positive integer, got 0\n"
        "training.batch_size: expected a positive integer, got -3\n"
        "training.epochs: expected a positive integer, got 0\n"
        "memory.poll_ms: expected a positive integer, got \"fast\"");
  doc = minimal();
  doc["shard"] = {{"epoch", 1}};
  CHECK(error_of(doc) ==
        "shard.epoch: unknown key; did you mean \"epochs\"?\n"
        "shard: expected exactly one of \"epochs\" or \"steps\", got neither");
}

TEST_CASE("integral numbers written as floats are accepted", "[unit][job_spec]") {
  json doc = minimal();
  doc["training"]["batch_size"] = 64.0;
  doc["training"]["epochs"] = 1e2;
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->training->batch_size == 64);
  CHECK(spec->training->epochs == 100);
}

TEST_CASE("null clears optional fields", "[unit][job_spec]") {
  json doc = minimal();
  doc["memory"] = {{"soft_limit_mib", nullptr}, {"hard_limit_mib", nullptr}};
  doc["model"]["initial_weights"] = nullptr;
  doc["worker"] = {{"command", nullptr}};
  doc["debug"] = {{"crash_at_step", nullptr}, {"hang_at_step", nullptr}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK_FALSE(spec->memory.soft_limit_mib);
  CHECK_FALSE(spec->model->initial_weights);
  CHECK_FALSE(spec->worker.command);
  CHECK_FALSE(spec->debug.crash_at_step);
}

TEST_CASE("syntax errors give line, column and byte offset", "[unit][job_spec]") {
  SECTION("bad literal: the newline after tru is the offending byte") {
    auto r = parse_job_spec("{\n  \"name\": tru\n}", base);
    REQUIRE_FALSE(r);
    INFO(r.error().message);
    CHECK(r.error().message.starts_with("invalid JSON at line 2, column 14 (byte 15): "));
    CHECK(r.error().message.find("json.exception") == std::string::npos);
  }
  SECTION("empty document") {
    auto r = parse_job_spec("", base);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("invalid JSON at line 1, column 1 (byte 0): "));
  }
  SECTION("trailing garbage") {
    auto r = parse_job_spec("{} x", base);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("invalid JSON at line 1, column 4 (byte 3): "));
  }
  SECTION("unterminated object") {
    auto r = parse_job_spec("{\"name\": \"a\",", base);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("invalid JSON at line 1, column 14 (byte 13): "));
  }
}

TEST_CASE("duplicate keys are rejected by path", "[unit][job_spec]") {
  auto r = parse_job_spec(
      R"({"name": "a", "name": "b", "training": {"epochs": 1, "epochs": 2},
          "model": {"layers": [{"units": 1}, {"units": 1, "units": 2}]}})",
      base);
  REQUIRE_FALSE(r);
  CHECK(
      r.error().message ==
      "name: duplicate key\ntraining.epochs: duplicate key\nmodel.layers[1].units: duplicate key");
}

TEST_CASE("document size limit is 1 MiB", "[unit][job_spec]") {
  std::string text = minimal().dump();
  text.resize(baton::protocol::max_job_document_bytes, ' ');
  CHECK(parse_job_spec(text, base));
  text.push_back(' ');
  auto r = parse_job_spec(text, base);
  REQUIRE_FALSE(r);
  CHECK(r.error().message ==
        "document is 1048577 bytes; a job document may be at most 1048576 bytes (1 MiB)");
}

TEST_CASE("nesting depth limit is 64", "[unit][job_spec]") {
  // The job object is level 1; "x" holds 63 more levels (64 total), or 64 more (65 total).
  const auto nested = [](int levels) {
    const std::string doc = minimal().dump();
    return doc.substr(0, doc.size() - 1) + ",\"x\":" + std::string(levels, '[') +
           std::string(levels, ']') + "}";
  };
  CHECK(parse_job_spec(nested(63), base).error().message ==
        "x: unknown key; expected one of name, data, model, training, shard, memory, restart, "
        "checkpoints, worker, debug, params");
  const std::string deep = nested(64);
  const auto offset = deep.find("\"x\":") + 4 + 63;
  CHECK(parse_job_spec(deep, base).error().message ==
        "document nests deeper than 64 levels at line 1, column " + std::to_string(offset + 1) +
            " (byte " + std::to_string(offset) + ")");
  // Far deeper than any recursive parser survives: must fail fast, not crash.
  const std::string hostile = std::string(500000, '[') + std::string(500000, ']');
  CHECK(parse_job_spec(hostile, base).error().message ==
        "document nests deeper than 64 levels at line 1, column 65 (byte 64)");
  // Brackets inside strings are not nesting.
  json doc = minimal();
  doc["name"] = "t";
  doc["model"]["layers"][0]["activation"] = "relu";
  std::string text = doc.dump();
  text = text.substr(0, text.size() - 1) + ",\"x\":\"" + std::string(100, '[') + "\"}";
  CHECK(parse_job_spec(text, base).error().message.starts_with("x: unknown key"));
}

TEST_CASE("defaults follow Keras fit()", "[unit][job_spec]") {
  auto spec = parse_job_spec(minimal().dump(), base);
  REQUIRE(spec);
  const auto& t = *spec->training;
  CHECK(t.epochs == 1);
  CHECK(t.batch_size == 32);
  CHECK(t.shuffle);
  CHECK(t.validation_split == 0.0);
  CHECK(t.threads == 0);
  CHECK(t.loss == baton::protocol::loss_kind::binary_crossentropy);
  CHECK(t.optimizer.kind == baton::protocol::optimizer_kind::adam);
  CHECK(t.optimizer.learning_rate == 0.001);
  CHECK(t.optimizer.beta_1 == 0.9);
  CHECK(t.optimizer.beta_2 == 0.999);
  CHECK(t.optimizer.epsilon == 1e-7);
  CHECK(spec->shard.unit == baton::protocol::shard_unit::epochs);
  CHECK(spec->shard.count == 1);
  CHECK(spec->memory.poll_ms == 100);
  CHECK_FALSE(spec->memory.soft_limit_mib);
  CHECK_FALSE(spec->memory.hard_limit_mib);
  CHECK(spec->restart.max_failures == 5);
  CHECK(spec->restart.backoff_initial_ms == 1000);
  CHECK(spec->restart.backoff_max_ms == 60000);
  CHECK(spec->restart.backoff_multiplier == 2.0);
  CHECK(spec->checkpoints.keep == 2);
  CHECK_FALSE(spec->worker.command);
  CHECK(spec->debug.leak_mib_per_step == 0.0);
  // A layer without an activation is linear, as in keras.layers.Dense.
  json doc = minimal();
  doc["model"]["layers"][0].erase("activation");
  spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->model->layers[0].act == baton::protocol::activation::linear);

  SECTION("sgd defaults to learning rate 0.01, by name or object") {
    for (json opt : {json("sgd"), json{{"type", "sgd"}}}) {
      doc = minimal();
      doc["training"]["optimizer"] = opt;
      spec = parse_job_spec(doc.dump(), base);
      REQUIRE(spec);
      CHECK(spec->training->optimizer.kind == baton::protocol::optimizer_kind::sgd);
      CHECK(spec->training->optimizer.learning_rate == 0.01);
      CHECK(spec->training->optimizer.momentum == 0.0);
      CHECK_FALSE(spec->training->optimizer.nesterov);
    }
  }
}

TEST_CASE("to_json fills every default and round-trips", "[unit][job_spec]") {
  auto spec = parse_job_spec(minimal().dump(), base);
  REQUIRE(spec);
  const json full = baton::protocol::to_json(*spec);
  CHECK(full["training"]["optimizer"]["epsilon"] == 1e-7);
  CHECK(full["training"]["epochs"] == 1);
  CHECK(full["shard"] == json{{"epochs", 1}});
  CHECK(full["memory"]["soft_limit_mib"].is_null());
  CHECK(full["restart"]["backoff_multiplier"] == 2.0);
  CHECK(full["worker"]["stop_grace_ms"] == 30000);
  CHECK(full["debug"]["crash_at_step"].is_null());
  auto again = parse_job_spec(full.dump(), "/elsewhere");
  REQUIRE(again);
  CHECK(*again == *spec);

  // Every field away from its default, including paths and the string label column.
  auto rich = parse_job_spec(R"({
    "name": "rich-1.0_x",
    "data": {"type": "csv", "path": "d/x.csv", "label_column": "y", "header": true,
             "standardize": true},
    "model": {"layers": [{"units": 5, "activation": "tanh"}, {"units": 3, "activation": "softmax"}],
              "initial_weights": "w.safetensors"},
    "training": {"loss": "categorical_crossentropy",
                 "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9,
                               "nesterov": true},
                 "batch_size": 7, "epochs": 3, "shuffle": false, "seed": 18446744073709551615,
                 "threads": 2, "validation_split": 0.1},
    "shard": {"steps": 11},
    "memory": {"soft_limit_mib": 100, "hard_limit_mib": 200, "poll_ms": 5},
    "restart": {"max_failures": 2, "backoff_initial_ms": 10, "backoff_max_ms": 20,
                "backoff_multiplier": 1.5},
    "checkpoints": {"keep": 4},
    "worker": {"command": ["python3", "train.py", "--fast"], "stall_timeout_ms": 9,
               "stop_grace_ms": 0},
    "debug": {"leak_mib_per_step": 0.25, "crash_at_step": 3, "hang_at_step": 0}
  })",
                             base);
  REQUIRE(rich);
  auto rich_again = parse_job_spec(baton::protocol::to_json(*rich).dump(), "/elsewhere");
  REQUIRE(rich_again);
  CHECK(*rich_again == *rich);
  CHECK(rich->training->seed == 18446744073709551615ull);

  // An integer label column and npy data survive too.
  json doc = minimal();
  doc["data"] = {{"type", "csv"}, {"path", "/abs/x.csv"}, {"label_column", -2}, {"header", false}};
  auto csv = parse_job_spec(doc.dump(), base);
  REQUIRE(csv);
  CHECK(std::get<baton::protocol::csv_data>(*csv->data).label_column ==
        std::variant<std::int64_t, std::string>(std::int64_t{-2}));
  CHECK(*parse_job_spec(baton::protocol::to_json(*csv).dump(), base) == *csv);
  doc["data"] = {{"type", "npy"}, {"features", "x.npy"}, {"labels", "y.npy"}};
  auto npy = parse_job_spec(doc.dump(), base);
  REQUIRE(npy);
  CHECK(*parse_job_spec(baton::protocol::to_json(*npy).dump(), base) == *npy);
}

TEST_CASE("relative paths resolve against the job's folder", "[unit][job_spec]") {
  json doc = minimal();
  doc["data"] = {{"type", "npy"}, {"features", "data/x.npy"}, {"labels", "../y.npy"}};
  doc["model"]["initial_weights"] = "/abs/w.safetensors";
  auto spec = parse_job_spec(doc.dump(), "/jobs/base");
  REQUIRE(spec);
  const auto& npy = std::get<baton::protocol::npy_data>(*spec->data);
  CHECK(npy.features == fs::path("/jobs/base/data/x.npy"));
  CHECK(npy.labels == fs::path("/jobs/y.npy"));
  CHECK(*spec->model->initial_weights == fs::path("/abs/w.safetensors"));
}

TEST_CASE("load_job_spec reads through the env and names the file", "[unit][job_spec]") {
  auto& e = baton::os::env::default_env();
  const auto dir = scratch_dir("load");
  json doc = minimal();
  doc["data"] = {{"type", "csv"}, {"path", "train.csv"}, {"label_column", "label"}};
  doc["model"]["initial_weights"] = "init.safetensors";
  write(dir / "job.json", doc.dump());

  auto spec = baton::protocol::load_job_spec(e, dir / "job.json");
  REQUIRE(spec);
  CHECK(std::get<baton::protocol::csv_data>(*spec->data).path == dir / "train.csv");

  // Neither file exists yet: both are named by JSON path and file path.
  auto files = baton::protocol::check_job_files(e, *spec);
  REQUIRE_FALSE(files);
  CHECK(files.error().message ==
        "data.path: file not found: " + (dir / "train.csv").string() +
            "\nmodel.initial_weights: file not found: " + (dir / "init.safetensors").string());
  write(dir / "train.csv", "a,label\n1,0\n");
  write(dir / "init.safetensors", "x");
  CHECK(baton::protocol::check_job_files(e, *spec));

  doc["training"] = {{"epochs", 0}, {"batch_size", 0}};
  write(dir / "bad.json", doc.dump());
  auto bad = baton::protocol::load_job_spec(e, dir / "bad.json");
  REQUIRE_FALSE(bad);
  const auto file = (dir / "bad.json").string();
  CHECK(bad.error().message == file +
                                   ": training.batch_size: expected a positive integer, got 0\n" +
                                   file + ": training.epochs: expected a positive integer, got 0");

  auto missing = baton::protocol::load_job_spec(e, dir / "absent.json");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find((dir / "absent.json").string()) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("npy files are checked by path", "[unit][job_spec]") {
  // An absolute path stays as given; a relative one resolves against the job's folder. Messages
  // spell paths natively (with '\' on Windows).
  const fs::path nowhere = baton::test::abs_path("/nonexistent");
  json doc = minimal();
  doc["data"] = {
      {"type", "npy"}, {"features", (nowhere / "x.npy").generic_string()}, {"labels", "y.npy"}};
  auto spec = parse_job_spec(doc.dump(), nowhere / "b");
  REQUIRE(spec);
  auto files = baton::protocol::check_job_files(baton::os::env::default_env(), *spec);
  REQUIRE_FALSE(files);
  CHECK(files.error().message ==
        "data.features: file not found: " + (nowhere / "x.npy").string() + "\n" +
            "data.labels: file not found: " + (nowhere / "b" / "y.npy").string());
  // Synthetic data names no files.
  CHECK(baton::protocol::check_job_files(baton::os::env::default_env(),
                                         *parse_job_spec(minimal().dump(), base)));
}

TEST_CASE("geometry follows Keras validation_split semantics", "[unit][job_spec]") {
  auto spec = *parse_job_spec(minimal().dump(), base);
  struct row {
    std::int64_t samples;
    double split;
    std::int64_t batch, epochs;
    baton::protocol::shard_spec shard;
    baton::protocol::job_geometry expected;
  };
  using baton::protocol::shard_unit;
  // clang-format off
  const std::vector<row> rows = {
    // the reference workload: 5000 samples, batch 32, 20 epochs -> 157 steps per epoch
    {5000, 0.0, 32, 20, {shard_unit::epochs, 1}, {5000, 0, 157, 3140, 157}},
    {1000, 0.2, 32, 2, {shard_unit::epochs, 2}, {800, 200, 25, 50, 50}},
    // floor(1001 * 0.9) = 900: the rounding goes to validation
    {1001, 0.1, 100, 3, {shard_unit::steps, 4}, {900, 101, 9, 27, 4}},
    {10, 0.25, 3, 1, {shard_unit::steps, 1}, {7, 3, 3, 3, 1}},
    {64, 0.0, 64, 1, {shard_unit::epochs, 1}, {64, 0, 1, 1, 1}},
    {65, 0.0, 64, 1, {shard_unit::epochs, 1}, {65, 0, 2, 2, 2}},
  };
  // clang-format on
  for (const auto& r : rows) {
    spec.training->validation_split = r.split;
    spec.training->batch_size = r.batch;
    spec.training->epochs = r.epochs;
    spec.shard = r.shard;
    INFO(r.samples << " samples, split " << r.split);
    const auto g = baton::protocol::compute_geometry(spec, r.samples);
    CHECK(g.train_samples == r.expected.train_samples);
    CHECK(g.validation_samples == r.expected.validation_samples);
    CHECK(g.steps_per_epoch == r.expected.steps_per_epoch);
    CHECK(g.total_steps == r.expected.total_steps);
    CHECK(g.shard_steps == r.expected.shard_steps);
  }
  // Absurd epoch counts saturate instead of wrapping.
  spec.training->epochs = std::numeric_limits<std::int64_t>::max();
  spec.training->batch_size = 1;
  CHECK(baton::protocol::compute_geometry(spec, 10).total_steps ==
        std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("every config in configs/ is valid and names existing files", "[unit][job_spec]") {
  auto& e = baton::os::env::default_env();
  const fs::path dir = fs::path(BATON_SOURCE_DIR) / "configs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path());
    auto spec = baton::protocol::load_job_spec(e, entry.path());
    REQUIRE(spec);
    CHECK(baton::protocol::check_job_files(e, *spec));
    CHECK(spec->name == entry.path().stem().string());
    ++count;
  }
  CHECK(count >= 3);
}

TEST_CASE("the seed config is the reference workload", "[unit][job_spec]") {
  auto spec = baton::protocol::load_job_spec(baton::os::env::default_env(),
                                             fs::path(BATON_SOURCE_DIR) / "configs/seed.json");
  REQUIRE(spec);
  CHECK(spec->model->layers.size() == 3);
  CHECK(spec->training->epochs == 20);
  const auto g = baton::protocol::compute_geometry(*spec, 5000);
  CHECK(g.steps_per_epoch == 157);
  CHECK(g.total_steps == 3140);
}

// Found by fuzz_job_spec (tests/fuzz/regressions/fuzz_job_spec/crash-bd767a5d...): the error for
// a long string value shortened it at byte 61, cutting a multi-byte character in half, and
// describe()'s dump() then threw json type_error 316 out of parse_job_spec.
TEST_CASE("long non-ASCII values in errors are shortened on a character boundary",
          "[unit][job_spec]") {
  std::string name;
  for (int i = 0; i < 40; ++i) name += "\xc3\xa9";  // "é" x 40: 80 bytes, byte 61 splits one
  auto doc = minimal();
  doc["name"] = name;
  std::string shortened;
  for (int i = 0; i < 30; ++i) shortened += "\xc3\xa9";  // 60 bytes: the last whole character
  CHECK(error_of(doc) == "name: expected 1 to 64 characters, got 80");
  doc["data"]["type"] = name;  // this one is quoted in the message
  CHECK(error_of(doc) ==
        "name: expected 1 to 64 characters, got 80\n"
        "data.type: unknown data type \"" +
            shortened + "...\"; expected one of synthetic, csv, npy");
}

// Found by fuzz_job_spec (regressions/fuzz_job_spec/crash-3f506352...): syntax errors quoted the
// raw bytes nlohmann last read, so invalid UTF-8 in a job file became invalid UTF-8 in the
// error, which the control API and job records carry as JSON. They are shown as \xNN.
TEST_CASE("syntax errors quote undecodable bytes as hex escapes", "[unit][job_spec]") {
  const auto r = parse_job_spec("[[\xff\x01", base);
  REQUIRE_FALSE(r);
  CHECK(r.error().message ==
        "invalid JSON at line 1, column 3 (byte 2): syntax error while parsing value - invalid "
        "literal; last read: '[[\\xff'");
  CHECK_NOTHROW(json(r.error().message).dump());
}

// ---------------------------------------------------------------------------------------------
// Jobs for any trainer: worker.command makes data, model and training optional; params is free.

namespace {

// What tests/data/jobs/command-params.json holds: a job for a trainer of its own.
json command_job() {
  return json::parse(R"({
    "name": "own-trainer",
    "worker": {"command": ["python3", "train.py"]},
    "shard": {"steps": 50},
    "memory": {"soft_limit_mib": 512},
    "params": {"lr": 0.003, "layers": [64, 64], "dataset": "mnist", "augment": true}
  })");
}

}  // namespace

TEST_CASE("a command worker's job needs no data, model or training", "[unit][job_spec]") {
  auto spec = parse_job_spec(command_job().dump(), base);
  REQUIRE(spec);
  CHECK_FALSE(spec->data);
  CHECK_FALSE(spec->model);
  CHECK_FALSE(spec->training);
  CHECK(spec->params == command_job()["params"]);
  CHECK(spec->shard.unit == baton::protocol::shard_unit::steps);
  CHECK(spec->shard.count == 50);

  const json full = baton::protocol::to_json(*spec);
  CHECK_FALSE(full.contains("data"));
  CHECK_FALSE(full.contains("model"));
  CHECK_FALSE(full.contains("training"));
  CHECK(full["params"] == command_job()["params"]);
  auto again = parse_job_spec(full.dump(), "/elsewhere");
  REQUIRE(again);
  CHECK(*again == *spec);

  // The spec cannot give the total; the worker's progress will.
  CHECK(baton::protocol::planned_total_steps(*spec) == 0);
  CHECK(baton::protocol::check_builtin_sections(*spec).error().message ==
        "data: missing; the built-in trainer needs it (this job names worker.command, which "
        "runs its own trainer)\n"
        "model: missing; the built-in trainer needs it (this job names worker.command, which "
        "runs its own trainer)\n"
        "training: missing; the built-in trainer needs it (this job names worker.command, which "
        "runs its own trainer)");
}

TEST_CASE("the committed command-worker job file is valid", "[unit][job_spec]") {
  const fs::path file =
      fs::path(BATON_SOURCE_DIR) / "tests" / "data" / "jobs" / "command-params.json";
  auto spec = baton::protocol::load_job_spec(baton::os::env::default_env(), file);
  REQUIRE(spec);
  // load_job_spec resolves against the file's absolute folder (C:\... on Windows).
  auto expected = parse_job_spec(command_job().dump(), fs::absolute(file).parent_path());
  REQUIRE(expected);
  CHECK(*spec == *expected);
}

TEST_CASE("params of every JSON type are kept verbatim", "[unit][job_spec]") {
  const json values[] = {
      true,
      false,
      0,
      -7,
      18446744073709551615ull,
      9223372036854775807ll,
      -9223372036854775807ll - 1,
      1.5,
      -0.25,
      1e300,
      4.9e-324,
      "",
      "text with \"quotes\", \\ and \xc3\xa9\xe2\x82\xac",
      json::array(),
      json::object(),
      json::parse(R"([1, "two", 3.0, null, [false], {"x": []}])"),
      json::parse(R"({"lr": 0.001, "nested": {"deeper": {"list": [1, 2, {"k": null}]}},
                      "name": "run-1", "flag": false, "none": null})"),
  };
  for (const bool with_command : {true, false}) {
    for (const auto& value : values) {
      INFO("params " << value.dump() << (with_command ? " with" : " without") << " a command");
      json doc = with_command ? command_job() : minimal();
      doc["params"] = value;
      auto spec = parse_job_spec(doc.dump(), base);
      REQUIRE(spec);
      CHECK(spec->params == value);
      CHECK(spec->params.type() == json::parse(value.dump()).type());
      const json full = baton::protocol::to_json(*spec);
      CHECK(full.at("params") == value);
      CHECK(full.at("params").dump() == value.dump());
      auto again = parse_job_spec(full.dump(), base);
      REQUIRE(again);
      CHECK(*again == *spec);
      CHECK(baton::protocol::to_json(*again).dump() == full.dump());
    }
  }
}

TEST_CASE("params null is the same as no params", "[unit][job_spec]") {
  json doc = command_job();
  doc["params"] = nullptr;
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->params.is_null());
  CHECK_FALSE(baton::protocol::to_json(*spec).contains("params"));
  doc.erase("params");
  CHECK(*parse_job_spec(doc.dump(), base) == *spec);
}

TEST_CASE("without worker.command data and model are still required", "[unit][job_spec]") {
  const std::string no_data =
      "data: missing, expected an object with \"type\" (synthetic, csv, npy)";
  const std::string no_model = "model: missing, expected an object with \"layers\"";
  json doc = command_job();
  doc["worker"].erase("command");
  CHECK(error_of(doc) == no_data + "\n" + no_model);
  doc["worker"]["command"] = nullptr;
  CHECK(error_of(doc) == no_data + "\n" + no_model);
  json no_data_doc = minimal();
  no_data_doc.erase("data");
  no_data_doc["params"] = {{"lr", 0.1}};
  CHECK(error_of(no_data_doc) == no_data);
  json no_model_doc = minimal();
  no_model_doc.erase("model");
  CHECK(error_of(no_model_doc) == no_model);

  // Training still takes every default without a command, and is written out in full.
  auto spec = parse_job_spec(minimal().dump(), base);
  REQUIRE(spec);
  REQUIRE(spec->training);
  CHECK(*spec->training == baton::protocol::training_spec{});
  CHECK(baton::protocol::to_json(*spec).contains("training"));
  CHECK(baton::protocol::check_builtin_sections(*spec));
}

TEST_CASE("a command worker's sections are checked when present", "[unit][job_spec]") {
  json doc = command_job();
  doc["training"] = {{"batch_size", -3}};
  CHECK(error_of(doc) == "training.batch_size: expected a positive integer, got -3");
  doc = command_job();
  doc["data"] = {{"type", "synthetic"}, {"samples", 64}, {"features", 3}};
  doc["training"] = {{"batch_size", 10}, {"epochs", 2}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK_FALSE(spec->model);
  // With data and training the spec gives the total: 2 epochs of ceil(64 / 10).
  CHECK(baton::protocol::planned_total_steps(*spec) == 14);
  CHECK(*parse_job_spec(baton::protocol::to_json(*spec).dump(), base) == *spec);
}

TEST_CASE("rules across sections skip the sections a command worker left out", "[unit][job_spec]") {
  // A softmax last layer with no training section: no loss to check it against.
  json doc = command_job();
  doc["model"] = {{"layers", {{{"units", 3}, {"activation", "softmax"}}}}};
  CHECK(error_of(doc) == "<valid>");
  // A training section brings the default loss, and the rule back.
  doc["training"] = json::object();
  CHECK(error_of(doc).rfind("training.loss: binary_crossentropy needs a last layer", 0) == 0);

  // validation_split without data, and data without training, are fine.
  doc = command_job();
  doc["training"] = {{"validation_split", 0.9}};
  CHECK(error_of(doc) == "<valid>");
  doc = command_job();
  doc["data"] = {{"type", "synthetic"}, {"samples", 1}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(baton::protocol::planned_total_steps(*spec) == 0);
  doc["training"] = {{"validation_split", 0.5}};
  CHECK(error_of(doc) == "training.validation_split: leaves no training samples of data.samples 1");
}

TEST_CASE("the shard length of a command worker needs no training section", "[unit][job_spec]") {
  json doc = command_job();
  doc["shard"] = {{"epochs", 3}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->shard.unit == baton::protocol::shard_unit::epochs);
  CHECK(spec->shard.count == 3);
  // Geometry falls back to training's defaults instead of reading an absent section.
  const auto g = baton::protocol::compute_geometry(*spec, 100);
  CHECK(g.steps_per_epoch == 4);
  CHECK(g.shard_steps == 12);
}

// ---- limits (issue 12, defect 7: inputs that validated and then crashed or hung) ----

TEST_CASE("an integral float past 2^53 is an integer, then range-checked", "[unit][job_spec]") {
  json doc = minimal();
  doc["training"]["batch_size"] = 1e18;  // once "expected a positive integer"
  doc["training"]["seed"] = 1e18;
  auto spec = parse_job_spec(doc.dump(), base);
  INFO(error_of(doc));
  REQUIRE(spec);
  CHECK(spec->training->batch_size == 1'000'000'000'000'000'000);
  CHECK(spec->training->seed == 1'000'000'000'000'000'000u);

  doc = minimal();
  doc["training"]["epochs"] = 1e18;
  CHECK(error_of(doc) ==
        "training.epochs: expected a positive integer no larger than 1000000000000, got 1e+18");
  doc["training"]["epochs"] = 1e19;  // past int64: still a number, not an integer we can hold
  CHECK_THAT(error_of(doc), Catch::StartsWith("training.epochs: expected a positive integer"));
  doc["training"]["epochs"] = 2.5;
  CHECK(error_of(doc) == "training.epochs: expected a positive integer, got 2.5");
}

TEST_CASE("step counts are bounded so no total or ETA overflows", "[unit][job_spec]") {
  json doc = minimal();  // 100 samples in batches of 32: 4 steps per epoch
  doc["training"]["epochs"] = 1'000'000'000'000;
  CHECK(error_of(doc) ==
        "training.epochs: 1000000000000 epochs of 4 steps are 4000000000000 steps; a job may "
        "have at most 1000000000000 (10^12)");
  doc["training"]["epochs"] = 250'000'000'000;  // exactly 10^12 steps
  CHECK(error_of(doc) == "<valid>");
  CHECK(baton::protocol::planned_total_steps(*parse_job_spec(doc.dump(), base)) ==
        baton::protocol::max_total_steps);
  doc = minimal();
  doc["shard"] = {{"steps", 1e13}};
  CHECK(error_of(doc) ==
        "shard.steps: expected a positive integer no larger than 1000000000000, got "
        "10000000000000.0");
}

TEST_CASE("training.threads is at most 4 per core of the machine", "[unit][job_spec]") {
  const baton::protocol::machine_limits two_cores{2, 0};
  json doc = minimal();
  doc["training"]["threads"] = 1'000'000;
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  auto s = baton::protocol::check_job_limits(*spec, two_cores);
  REQUIRE_FALSE(s);
  CHECK(s.error().message ==
        "training.threads: at most 8 (4 per core; this machine has 2 cores), got 1000000; 0 uses "
        "one per core");
  for (const int ok : {0, 1, 8}) {
    doc["training"]["threads"] = ok;
    CHECK(baton::protocol::check_job_limits(*parse_job_spec(doc.dump(), base), two_cores));
  }
}

TEST_CASE("a model too big for its memory limit or the machine is refused before any run",
          "[unit][job_spec]") {
  json doc = minimal();  // 4 features -> 1e9 units -> 1
  doc["model"]["layers"][0]["units"] = 1'000'000'000;
  doc["memory"] = {{"soft_limit_mib", 4096}, {"hard_limit_mib", 6144}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);  // the document itself is fine: the machine decides
  const auto est = baton::protocol::estimate_memory(*spec);
  CHECK(est.parameters == 6e9 + 1);  // 4*1e9 + 1e9 weights and biases, then 1e9 + 1
  CHECK(est.bytes_per_parameter == 16);
  CHECK(est.biggest_field == "model.layers[0].units");
  const baton::protocol::machine_limits big{2, std::uint64_t{1} << 50};
  auto s = baton::protocol::check_job_limits(*spec, big);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message,
             Catch::StartsWith("model.layers[0].units: the job needs at least 447.0 GiB "
                               "(6000000001 parameters x 16 bytes for weights, gradients and "
                               "Adam's two moments = 89.4 GiB, data 2.0 KiB, one batch's "
                               "activations 357.6 GiB)") &&
                 Catch::EndsWith(", more than memory.soft_limit_mib 4096 MiB"));

  // No limit of its own: the machine's memory is the bound.
  doc.erase("memory");
  spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  const baton::protocol::machine_limits small{2, std::uint64_t{8} << 30};
  s = baton::protocol::check_job_limits(*spec, small);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::EndsWith(", more than this machine's 8.0 GiB of memory"));
  CHECK(baton::protocol::check_job_limits(*spec, big));  // fits a petabyte

  // Plain SGD keeps no state per parameter; a huge synthetic data set is named as the cause.
  doc = minimal();
  doc["training"]["optimizer"] = {{"type", "sgd"}};
  doc["data"]["samples"] = 1e12;
  spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(baton::protocol::estimate_memory(*spec).bytes_per_parameter == 8);
  s = baton::protocol::check_job_limits(*spec, small);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::StartsWith("data.samples: the job needs at least 18.2 TiB"));

  // The everyday job passes, and a job without a model (a command worker's) has nothing to check.
  CHECK(baton::protocol::check_job_limits(*parse_job_spec(minimal().dump(), base), small));
  auto command = parse_job_spec(R"({"name": "c", "worker": {"command": ["x"]}})", base);
  REQUIRE(command);
  CHECK(baton::protocol::check_job_limits(*command, small));
}

TEST_CASE("a data path that is a folder fails, naming the field", "[unit][job_spec]") {
  const auto dir = scratch_dir("folder-data");
  fs::create_directories(dir / "train.csv");
  json doc = minimal();
  doc["data"] = {{"type", "csv"}, {"path", "train.csv"}};
  auto spec = parse_job_spec(doc.dump(), dir);
  REQUIRE(spec);
  auto files = baton::protocol::check_job_files(baton::os::env::default_env(), *spec);
  REQUIRE_FALSE(files);
  CHECK(files.error().message ==
        "data.path: expected a regular file, got a folder: " + (dir / "train.csv").string());
  fs::remove_all(dir);
}

#ifdef _WIN32
TEST_CASE("worker.preload is refused on Windows", "[unit][job_spec]") {
  auto doc = minimal();
  doc["worker"]["command"] = {"python", "train.py"};
  doc["worker"]["preload"] = {"torch"};
  CHECK(error_of(doc) ==
        "worker.preload: not supported on Windows: the fork server forks each shard");
  doc["worker"]["preload"] = json::array();
  CHECK(parse_job_spec(doc.dump(), base));
}
#else
TEST_CASE("worker.preload reaches the spec and round-trips", "[unit][job_spec]") {
  auto doc = minimal();
  doc["worker"]["command"] = {"python3", "train.py", "--fast"};
  doc["worker"]["preload"] = {"torch", "torch.nn", "_private.mod2"};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->worker.preload == std::vector<std::string>{"torch", "torch.nn", "_private.mod2"});
  auto again = parse_job_spec(baton::protocol::to_json(*spec).dump(), base);
  REQUIRE(again);
  CHECK(*again == *spec);
  doc["worker"]["preload"] = nullptr;
  auto none = parse_job_spec(doc.dump(), base);
  REQUIRE(none);
  CHECK(none->worker.preload.empty());
}

TEST_CASE("worker.start_ahead cannot be true with worker.preload", "[unit][job_spec]") {
  auto doc = minimal();
  doc["worker"]["command"] = {"python3", "train.py"};
  doc["worker"]["preload"] = {"torch"};
  doc["worker"]["start_ahead"] = true;
  CHECK(error_of(doc) ==
        "worker.start_ahead: cannot be true with worker.preload: the fork server forks each "
        "shard ahead itself");
  doc["worker"]["start_ahead"] = false;
  CHECK(parse_job_spec(doc.dump(), base));
}

#endif

TEST_CASE("worker.start_ahead reaches the spec and round-trips", "[unit][job_spec]") {
  auto doc = minimal();
  auto unset = parse_job_spec(doc.dump(), base);
  REQUIRE(unset);
  CHECK_FALSE(unset->worker.start_ahead);
  for (const bool value : {true, false}) {
    doc["worker"]["start_ahead"] = value;
    auto spec = parse_job_spec(doc.dump(), base);
    REQUIRE(spec);
    CHECK(spec->worker.start_ahead == std::optional<bool>(value));
    auto again = parse_job_spec(baton::protocol::to_json(*spec).dump(), base);
    REQUIRE(again);
    CHECK(*again == *spec);
  }
  doc["worker"]["start_ahead"] = "yes";
  CHECK(error_of(doc) == "worker.start_ahead: expected true, false or null, got \"yes\"");
}

TEST_CASE("worker.env reaches the spec and round-trips", "[unit][job_spec]") {
  auto doc = minimal();
  doc["worker"]["env"] = {{"CUDA_VISIBLE_DEVICES", "1"}, {"OMP_NUM_THREADS", "4"}};
  auto spec = parse_job_spec(doc.dump(), base);
  REQUIRE(spec);
  CHECK(spec->worker.env == std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "1"},
                                                               {"OMP_NUM_THREADS", "4"}});
  auto again = parse_job_spec(baton::protocol::to_json(*spec).dump(), base);
  REQUIRE(again);
  CHECK(*again == *spec);
}
