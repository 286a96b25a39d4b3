#include "worker/trainer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <stdexcept>

#include "os/mem_env.h"
#include "protocol/digest.h"
#include "worker/parallel.h"

using namespace baton;
using namespace baton::worker;
using Catch::Matchers::Contains;

namespace {

// 130 samples, 20% validation: 104 training rows, batch 16 -> 7 steps per epoch, the last one
// short (8 rows), 3 epochs = 21 steps.
protocol::job_spec small_spec(bool shuffle = true, double validation = 0.2) {
  protocol::job_spec s;
  s.name = "trainer-test";
  s.data = protocol::synthetic_data{130, 6, 3};
  s.model->layers = {{12, protocol::activation::relu}, {1, protocol::activation::sigmoid}};
  s.training->batch_size = 16;
  s.training->epochs = 3;
  s.training->shuffle = shuffle;
  s.training->seed = 17;
  s.training->validation_split = validation;
  s.training->optimizer.learning_rate = 0.01;
  s.shard.unit = protocol::shard_unit::steps;
  s.shard.count = 5;
  return s;
}

dataset data_for(const protocol::job_spec& s) {
  os::mem_env e;
  return load_dataset(e, *s.data, s.training->loss, s.model->layers.back().units).value();
}

std::unique_ptr<trainer> make(const protocol::job_spec& s, os::env& e,
                              initial_weights init = initial_weights::from_spec) {
  auto t = trainer::create(s, data_for(s), e, init);
  REQUIRE(t);
  return std::move(*t);
}

std::unique_ptr<trainer> make(const protocol::job_spec& s,
                              initial_weights init = initial_weights::from_spec) {
  os::mem_env e;
  return make(s, e, init);
}

// Every tensor's bytes and every metadata value, as the file would hold them.
std::map<std::string, std::string> contents(trainer& t) {
  std::map<std::string, std::string> out;
  const auto c = t.snapshot();
  for (const auto& tensor : c.tensors) out["tensor " + tensor.name] = tensor.bytes;
  for (const auto& [k, v] : c.metadata) out["meta " + k] = v;
  return out;
}

protocol::checkpoint round_trip(trainer& t) {
  auto bytes = protocol::encode_checkpoint(t.snapshot());
  REQUIRE(bytes);
  auto c = protocol::decode_checkpoint(*bytes, "mem");
  REQUIRE(c);
  return std::move(*c);
}

// Runs `s` to the end, cutting at `cuts` (ascending steps): each piece is a fresh trainer that
// resumes from the previous piece's checkpoint after an encode/decode round trip, made as a
// resuming worker makes it (no initial weights: the restore brings them).
std::map<std::string, std::string> run_in_pieces(const protocol::job_spec& s,
                                                 const std::vector<std::int64_t>& cuts) {
  auto t = make(s);
  for (std::int64_t cut : cuts) {
    while (t->step() < cut) t->run_step();
    const auto c = round_trip(*t);
    t = make(s, initial_weights::left_for_restore);
    REQUIRE(t->restore(c, "mem"));
    REQUIRE(t->step() == cut);
  }
  while (!t->finished()) t->run_step();
  return contents(*t);
}

}  // namespace

TEST_CASE("trainer geometry follows Keras", "[unit][trainer]") {
  auto t = make(small_spec());
  CHECK(t->geometry().train_samples == 104);
  CHECK(t->geometry().validation_samples == 26);
  CHECK(t->geometry().steps_per_epoch == 7);
  CHECK(t->geometry().total_steps == 21);
  std::int64_t seen = 0;
  for (int k = 0; k < 7; ++k) {
    const auto out = t->run_step();
    CHECK(out.batch_size == (k < 6 ? 16 : 8));
    CHECK(out.epoch == 0);
    CHECK(out.epoch_end == (k == 6));
    seen += out.batch_size;
  }
  CHECK(seen == 104);
  CHECK(t->epoch() == 1);
}

TEST_CASE("resume at any step gives bit-identical weights and optimizer state", "[unit][trainer]") {
  set_thread_count(1);
  for (bool shuffle : {true, false}) {
    INFO("shuffle " << shuffle);
    const auto spec = small_spec(shuffle);
    const auto whole = run_in_pieces(spec, {});
    // Epoch boundaries, mid-epoch, the first and the last step.
    CHECK(run_in_pieces(spec, {7, 14}) == whole);
    CHECK(run_in_pieces(spec, {3, 10, 18}) == whole);
    CHECK(run_in_pieces(spec, {0, 1, 20, 21}) == whole);
    std::mt19937_64 gen(20240611);
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<std::int64_t> cuts;
      for (std::int64_t s = 0; s <= 21; ++s) {
        if (gen() % 4 == 0) cuts.push_back(s);
      }
      INFO("trial " << trial << " with " << cuts.size() << " cuts");
      CHECK(run_in_pieces(spec, cuts) == whole);
    }
  }
  // Different seeds really train differently, so the comparison above can fail.
  auto other = small_spec();
  other.training->seed = 18;
  CHECK(run_in_pieces(other, {}) != run_in_pieces(small_spec(), {}));
}

TEST_CASE("resume is exact with SGD momentum and at 2 threads", "[unit][trainer]") {
  set_thread_count(2);
  auto spec = small_spec();
  spec.training->optimizer.kind = protocol::optimizer_kind::sgd;
  spec.training->optimizer.momentum = 0.9;
  spec.training->threads = 2;
  const auto whole = run_in_pieces(spec, {});
  CHECK(whole.count("tensor optimizer.layers.0.kernel.momentum") == 1);
  CHECK(run_in_pieces(spec, {4, 9, 13}) == whole);
  set_thread_count(1);
}

TEST_CASE("checkpoint holds weights, optimizer state, order and exact sums", "[unit][trainer]") {
  auto t = make(small_spec());
  for (int i = 0; i < 10; ++i) t->run_step();
  const auto c = t->snapshot();
  for (const char* name : {"layers.0.kernel", "layers.0.bias", "layers.1.kernel", "layers.1.bias",
                           "optimizer.layers.0.kernel.m", "optimizer.layers.0.kernel.v",
                           "optimizer.layers.1.bias.v", "data.order", "rng.state"}) {
    INFO(name);
    CHECK(c.find(name) != nullptr);
  }
  CHECK(c.find("layers.0.kernel")->shape == std::vector<std::int64_t>{6, 12});
  CHECK(c.find("data.order")->type == protocol::dtype::i64);
  CHECK(c.find("data.order")->shape == std::vector<std::int64_t>{104});
  CHECK(c.find("rng.state")->type == protocol::dtype::u64);
  CHECK(c.metadata.at("step") == "10");
  CHECK(c.metadata.at("epoch") == "1");
  CHECK(c.metadata.at("step_in_epoch") == "3");
  CHECK(c.metadata.at("optimizer_iterations") == "10");
  CHECK(c.metadata.at("epoch_samples") == "48");
  const double loss_sum = parse_exact_double(c.metadata.at("epoch_loss_sum")).value();
  CHECK(loss_sum / 48 == t->epoch_loss());
  CHECK(c.metadata.at("spec_fingerprint") == spec_fingerprint(small_spec()));
}

TEST_CASE("epoch metrics: batch-size-weighted means and validation on the tail",
          "[unit][trainer]") {
  auto spec = small_spec();
  auto t = make(spec);
  double loss_sum = 0;
  std::int64_t n = 0;
  step_outcome out;
  for (int k = 0; k < 7; ++k) {
    out = t->run_step();
    loss_sum += out.batch_loss * static_cast<double>(out.batch_size);
    n += out.batch_size;
    CHECK(out.epoch_loss == Approx(loss_sum / static_cast<double>(n)).epsilon(1e-12));
    CHECK(out.epoch_accuracy >= 0.0);
    CHECK(out.epoch_accuracy <= 1.0);
    CHECK(out.val_loss.has_value() == out.epoch_end);
  }
  REQUIRE(out.val_loss);
  REQUIRE(out.val_accuracy);
  // The same numbers from an independent model holding the trained weights.
  auto data = data_for(spec);
  auto m = model<float>::create(*spec.model, 6, spec.training->loss, 16).value();
  REQUIRE(load_initial_weights(m, t->snapshot(), "snapshot"));
  const const_matrix_map<float> xv(data.x.data() + 104 * 6, 26, 6);
  const const_matrix_map<float> yv(data.y.data() + 104, 26, 1);
  const auto e = m.evaluate(xv, yv);
  CHECK(*out.val_loss == e.loss);
  CHECK(*out.val_accuracy == e.accuracy);

  auto no_val = make(small_spec(true, 0.0));
  CHECK(no_val->geometry().validation_samples == 0);
  step_outcome last;
  for (int k = 0; k < no_val->geometry().steps_per_epoch; ++k) last = no_val->run_step();
  CHECK(last.epoch_end);
  CHECK_FALSE(last.val_loss);
}

TEST_CASE("sample order: identity without shuffle, a fresh permutation each epoch",
          "[unit][trainer]") {
  rng r(0);
  const auto identity = epoch_order(5, 2, 10, false, r);
  for (std::int64_t i = 0; i < 10; ++i) CHECK(identity[static_cast<std::size_t>(i)] == i);
  rng a(0), b(0);
  const auto e0 = epoch_order(5, 0, 100, true, a);
  CHECK(epoch_order(5, 0, 100, true, b) == e0);
  CHECK(a.state() == b.state());
  CHECK(epoch_order(5, 1, 100, true, b) != e0);
  CHECK(epoch_order(6, 0, 100, true, b) != e0);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 100; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);

  auto t = make(small_spec(true));
  const auto first = t->order();
  for (int i = 0; i < 7; ++i) t->run_step();
  CHECK(t->order() != first);
  auto plain = make(small_spec(false));
  CHECK(plain->order() == epoch_order(0, 0, 104, false, r));
}

TEST_CASE("shard boundaries are aligned multiples of shard_steps", "[unit][trainer]") {
  protocol::job_geometry g;
  g.steps_per_epoch = 7;
  g.total_steps = 21;
  g.shard_steps = 5;
  CHECK(shard_boundary(0, g) == 5);
  CHECK(shard_boundary(3, g) == 5);
  CHECK(shard_boundary(5, g) == 10);
  CHECK(shard_boundary(19, g) == 20);
  CHECK(shard_boundary(20, g) == 21);
  CHECK(shard_boundary(21, g) == 21);
}

TEST_CASE("restore refuses a checkpoint from a changed spec or data", "[unit][trainer]") {
  auto t = make(small_spec());
  for (int i = 0; i < 4; ++i) t->run_step();
  const auto c = round_trip(*t);

  auto changed = small_spec();
  SECTION("training") {
    changed.training->optimizer.learning_rate = 0.02;
    auto r = make(changed)->restore(c, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message,
               Contains("ckpt-4: the job spec changed") && Contains("(training"));
  }
  SECTION("model") {
    changed.model->layers[0].units = 13;
    auto r = make(changed)->restore(c, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("(model differ"));
  }
  SECTION("data spec") {
    changed.data = protocol::synthetic_data{130, 6, 4};
    auto r = make(changed)->restore(c, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("(data differ"));
  }
  SECTION("data content with the same spec") {
    auto d = data_for(changed);
    d.x(0, 0) += 1.0f;
    os::mem_env e;
    auto other = trainer::create(changed, std::move(d), e).value();
    auto r = other->restore(c, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("training data changed"));
  }
  SECTION("another job") {
    changed.name = "other";
    auto r = make(changed)->restore(c, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("belongs to job \"trainer-test\""));
  }
  SECTION("threads may change") {
    changed.training->threads = 3;
    CHECK(make(changed)->restore(c, "ckpt-4"));
  }
  SECTION("a tampered order") {
    auto bad = c;
    for (auto& tensor : bad.tensors) {
      if (tensor.name == "data.order") std::swap(tensor.bytes[0], tensor.bytes[8]);
    }
    auto fresh = make(small_spec());
    const auto before = contents(*fresh);
    auto r = fresh->restore(bad, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("data.order"));
    CHECK(contents(*fresh) == before);  // untouched on failure
  }
  SECTION("a missing optimizer tensor") {
    auto bad = c;
    std::erase_if(bad.tensors, [](const auto& x) { return x.name == "optimizer.layers.1.bias.m"; });
    auto r = make(small_spec())->restore(bad, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("no tensor \"optimizer.layers.1.bias.m\""));
  }
  SECTION("inconsistent step metadata") {
    auto bad = c;
    bad.metadata["step_in_epoch"] = "2";
    auto r = make(small_spec())->restore(bad, "ckpt-4");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("do not match step 4"));
  }
}

namespace {

std::string le64(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

// A safetensors file as other tools write it: no __metadata__, no digest.
std::string foreign_file(const std::vector<protocol::tensor>& tensors) {
  // Built with nlohmann rather than string sums: GCC 12 warns falsely (-Wrestrict) on those.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", std::string(to_string(t.type))},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string h = header.dump();
  return le64(h.size()) + h + data;
}

template <class T>
protocol::tensor tensor_of(std::string name, protocol::dtype type, std::vector<std::int64_t> shape,
                           const std::vector<T>& v) {
  protocol::tensor t;
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return t;
}

// Weights for small_spec()'s model as F64: value i of tensor k is k + i / 1000.
std::vector<protocol::tensor> f64_weights() {
  std::vector<protocol::tensor> out;
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {
      {"layers.0.kernel", {6, 12}},
      {"layers.0.bias", {12}},
      {"layers.1.kernel", {12, 1}},
      {"layers.1.bias", {1}}};
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    std::int64_t n = 1;
    for (auto d : shapes[k].second) n *= d;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(k) + i / 1000.0;
    out.push_back(tensor_of(shapes[k].first, protocol::dtype::f64, shapes[k].second, v));
  }
  return out;
}

result<std::unique_ptr<trainer>> with_weights(const std::string& file_bytes) {
  os::mem_env e;
  REQUIRE(e.create_dirs("/w"));
  REQUIRE(e.put("/w/init.safetensors", file_bytes));
  auto spec = small_spec();
  spec.model->initial_weights = "/w/init.safetensors";
  return trainer::create(spec, data_for(spec), e);
}

}  // namespace

TEST_CASE("initial weights load from any safetensors file, F32 or F64", "[unit][trainer]") {
  auto t = with_weights(foreign_file(f64_weights()));
  REQUIRE(t);
  const auto c = (*t)->snapshot();
  const float* k0 = c.find("layers.0.kernel")->data_as<float>();
  CHECK(k0[0] == 0.0f);
  CHECK(k0[71] == static_cast<float>(0.071));
  CHECK(c.find("layers.1.bias")->data_as<float>()[0] == 3.0f);

  // A baton checkpoint (F32, with metadata and optimizer state) works as initial weights too.
  auto trained = make(small_spec());
  for (int i = 0; i < 3; ++i) trained->run_step();
  auto bytes = protocol::encode_checkpoint(trained->snapshot());
  REQUIRE(bytes);
  auto from_ckpt = with_weights(*bytes);
  REQUIRE(from_ckpt);
  CHECK((*from_ckpt)->snapshot().find("layers.0.kernel")->bytes ==
        trained->snapshot().find("layers.0.kernel")->bytes);
  CHECK((*from_ckpt)->step() == 0);
}

TEST_CASE("initial weights errors name the tensor and the expected shape", "[unit][trainer]") {
  auto w = f64_weights();
  const auto error_of = [](const std::vector<protocol::tensor>& ts) {
    auto r = with_weights(foreign_file(ts));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("model.initial_weights: /w/init.safetensors: "));
    return r.error().message;
  };
  SECTION("wrong kernel shape") {
    w[0].shape = {12, 6};
    CHECK_THAT(error_of(w), Contains("\"layers.0.kernel\" has shape [12, 6] but model.layers[0] "
                                     "needs [6, 12] (inputs, units)"));
  }
  SECTION("wrong bias shape") {
    w[3] = tensor_of<double>("layers.1.bias", protocol::dtype::f64, {2}, {1.0, 2.0});
    CHECK_THAT(error_of(w),
               Contains("\"layers.1.bias\" has shape [2] but model.layers[1] needs [1]"));
  }
  SECTION("missing tensor") {
    w.erase(w.begin() + 1);
    CHECK_THAT(error_of(w), Contains("no tensor \"layers.0.bias\" (model.layers[0] needs [12])"));
  }
  SECTION("integer dtype") {
    w[3] = tensor_of<std::int64_t>("layers.1.bias", protocol::dtype::i64, {1}, {1});
    CHECK_THAT(error_of(w), Contains("\"layers.1.bias\" is I64; weights must be F32 or F64"));
  }
  SECTION("a layer the model does not have") {
    w.push_back(tensor_of<double>("layers.2.bias", protocol::dtype::f64, {1}, {1.0}));
    CHECK_THAT(error_of(w), Contains("\"layers.2.bias\" does not belong to the model"));
  }
  SECTION("non-finite or out-of-range values") {
    w[3] = tensor_of<double>("layers.1.bias", protocol::dtype::f64, {1}, {1e300});
    CHECK_THAT(error_of(w), Contains("outside the float32 range"));
    w[3] = tensor_of<double>("layers.1.bias", protocol::dtype::f64, {1}, {std::nan("")});
    CHECK_THAT(error_of(w), Contains("weights must be finite"));
  }
  SECTION("not a safetensors file") {
    auto r = with_weights("not safetensors at all");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message,
               Contains("model.initial_weights: /w/init.safetensors: header length"));
  }
  SECTION("a missing file") {
    os::mem_env e;
    auto spec = small_spec();
    spec.model->initial_weights = "/nowhere/w.safetensors";
    auto r = trainer::create(spec, data_for(spec), e);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Contains("model.initial_weights"));
  }
}

TEST_CASE("exact doubles round-trip through metadata text", "[unit][trainer]") {
  // No denormals: the worker runs with flush-to-zero (set_thread_count), so its sums never are
  // one, and an earlier test in this process may have switched that mode on for this thread.
  for (double v : {0.0, -0.0, 1.0 / 3.0, 123456.789e200, 2.2250738585072014e-308, -2.5}) {
    const auto s = exact_double(v);
    auto back = parse_exact_double(s);
    REQUIRE(back);
    CHECK(std::memcmp(&*back, &v, sizeof v) == 0);
  }
  CHECK_FALSE(parse_exact_double("0x1p3"));
  CHECK_FALSE(parse_exact_double(""));
  CHECK_FALSE(parse_exact_double("1.8p+1 "));
}

TEST_CASE("trainer snapshot_view writes the snapshot's bytes and restores the same state",
          "[unit][trainer]") {
  const auto s = small_spec();
  auto t = make(s);
  for (int i = 0; i < 9; ++i) t->run_step();  // mid second epoch: order and rng state matter
  auto owned = protocol::encode_checkpoint(t->snapshot());
  REQUIRE(owned);
  std::string streamed;
  REQUIRE(protocol::write_checkpoint(t->snapshot_view(), [&](std::string_view p) -> status {
    streamed += p;
    return {};
  }));
  CHECK(streamed == *owned);
  // The views point at the trainer's live buffers, not at copies.
  const auto v = t->snapshot_view();
  const auto* kernel = v.find("layers.0.kernel");
  REQUIRE(kernel != nullptr);
  CHECK(kernel->bytes == t->snapshot().find("layers.0.kernel")->bytes);

  auto decoded = protocol::decode_checkpoint_view(streamed, "mem");
  REQUIRE(decoded);
  auto resumed = make(s);
  REQUIRE(resumed->restore(*decoded, "mem"));
  CHECK(contents(*resumed) == contents(*t));
  while (!t->finished()) {
    t->run_step();
    resumed->run_step();
  }
  CHECK(contents(*resumed) == contents(*t));
}

TEST_CASE("a trainer made for a restore skips the initial weights and its first step is exact",
          "[unit][trainer]") {
  set_thread_count(1);
  const auto s = small_spec();
  // Fresh: Glorot, as before (not all zero).
  auto fresh = make(s);
  const auto kernel = [](trainer& t) { return t.snapshot().find("layers.0.kernel")->bytes; };
  const std::string zeros(kernel(*fresh).size(), '\0');
  CHECK(kernel(*fresh) != zeros);
  CHECK(kernel(*fresh) == kernel(*make(s)));  // same seed, same draw
  // For a restore: nothing drawn, and model.initial_weights is not even read (the env has no
  // such file, which a fresh start would refuse).
  auto with_file = s;
  with_file.model->initial_weights = "/nowhere/weights.safetensors";
  os::mem_env empty;
  CHECK_FALSE(trainer::create(with_file, data_for(with_file), empty));
  auto bare =
      trainer::create(with_file, data_for(with_file), empty, initial_weights::left_for_restore);
  REQUIRE(bare);
  // Not even zeroed: the storage is uninitialised, so nothing may read it before a restore.
  CHECK((*bare)->awaiting_restore());
  CHECK_THROWS_AS((*bare)->snapshot(), std::logic_error);
  CHECK_THROWS_AS((*bare)->run_step(), std::logic_error);

  // A resumed worker's first step, and every step after, as in the unbroken run.
  for (int i = 0; i < 10; ++i) fresh->run_step();
  const auto c = round_trip(*fresh);
  auto resumed = make(s, initial_weights::left_for_restore);
  REQUIRE(resumed->restore(c, "mem"));
  CHECK(contents(*resumed) == contents(*fresh));
  const auto a = fresh->run_step();
  const auto b = resumed->run_step();
  CHECK(a.batch_loss == b.batch_loss);
  CHECK(contents(*resumed) == contents(*fresh));
  while (!fresh->finished()) {
    fresh->run_step();
    resumed->run_step();
  }
  CHECK(contents(*resumed) == contents(*fresh));
}

TEST_CASE(
    "a restore into uninitialised storage fails naming any tensor it lacks and keeps refusing",
    "[unit][trainer]") {
  set_thread_count(1);
  for (const auto kind : {protocol::optimizer_kind::adam, protocol::optimizer_kind::sgd}) {
    auto s = small_spec();
    s.training->optimizer.kind = kind;
    s.training->optimizer.momentum = 0.9;
    INFO("optimizer " << (kind == protocol::optimizer_kind::adam ? "adam" : "sgd"));
    auto fresh = make(s);
    for (int i = 0; i < 4; ++i) fresh->run_step();
    const auto full = round_trip(*fresh);
    // Every weight, bias and moment (and the order and generator) is required: a checkpoint
    // without one must not leave that tensor's uninitialised bytes in a trainer that then runs.
    REQUIRE(full.tensors.size() >= 10);
    for (std::size_t drop = 0; drop < full.tensors.size(); ++drop) {
      const std::string name = full.tensors[drop].name;
      INFO("without " << name);
      auto partial = full;
      partial.tensors.erase(partial.tensors.begin() + static_cast<std::ptrdiff_t>(drop));
      auto t = make(s, initial_weights::left_for_restore);
      const auto r = t->restore(partial, "mem");
      REQUIRE_FALSE(r);
      CHECK_THAT(r.error().message, Contains("no tensor \"" + name + "\""));
      CHECK(t->awaiting_restore());
      CHECK_THROWS_AS(t->run_step(), std::logic_error);
      CHECK_THROWS_AS(t->snapshot_view(), std::logic_error);
      // The same trainer then restores from a whole checkpoint and is exact.
      REQUIRE(t->restore(full, "mem"));
      CHECK_FALSE(t->awaiting_restore());
      CHECK(contents(*t) == contents(*fresh));
    }
  }
}

namespace {
protocol::range_reader whole_reader(const std::string& bytes) {
  return [&bytes](std::uint64_t offset, std::size_t n, std::string& out) -> status {
    out = offset >= bytes.size() ? std::string() : bytes.substr(offset, n);
    return {};
  };
}
protocol::range_reader_into into_reader(const std::string& bytes, int* reads = nullptr) {
  return [&bytes, reads](std::uint64_t offset, std::span<char> out) -> status {
    if (reads) ++*reads;
    if (offset > bytes.size() || out.size() > bytes.size() - offset) {
      return make_error("file ended");
    }
    std::memcpy(out.data(), bytes.data() + offset, out.size());
    return {};
  };
}
}  // namespace

TEST_CASE("a restore straight from the file is the same state, and refuses a changed file",
          "[unit][trainer]") {
  set_thread_count(1);
  const auto s = small_spec();
  auto fresh = make(s);
  for (int i = 0; i < 9; ++i) fresh->run_step();
  auto bytes = protocol::encode_checkpoint(fresh->snapshot());
  REQUIRE(bytes);
  auto idx = protocol::index_checkpoint_streamed(whole_reader(*bytes), bytes->size(), "f");
  REQUIRE(idx);

  auto resumed = make(s, initial_weights::left_for_restore);
  REQUIRE(resumed->restore(*idx, into_reader(*bytes), "f"));
  CHECK_FALSE(resumed->awaiting_restore());
  CHECK(contents(*resumed) == contents(*fresh));
  while (!fresh->finished()) {
    fresh->run_step();
    resumed->run_step();
  }
  CHECK(contents(*resumed) == contents(*fresh));

  // A byte of a moment changed after the file was indexed: refused by the digest, and the
  // trainer, its tensors half written, keeps refusing to run.
  std::string changed = *bytes;
  const auto* m = idx->find("optimizer.layers.1.kernel.m");
  REQUIRE(m);
  changed[m->offset + m->size / 2] ^= 0x10;
  auto t = make(s, initial_weights::left_for_restore);
  const auto r = t->restore(*idx, into_reader(changed), "/c/f");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Contains("/c/f: changed since it was verified"));
  CHECK(t->awaiting_restore());
  CHECK_THROWS_AS(t->run_step(), std::logic_error);
  // A restored trainer that fails a later restore half way stops too, rather than run on a mix.
  auto restored = make(s, initial_weights::left_for_restore);
  REQUIRE(restored->restore(*idx, into_reader(*bytes), "f"));
  CHECK_FALSE(restored->restore(*idx, into_reader(changed), "f"));
  CHECK(restored->awaiting_restore());

  // A header that lacks a tensor, or does not fit the spec, fails before anything is read.
  auto partial = fresh->snapshot();
  partial.tensors.erase(partial.tensors.begin() + 1);  // layers.0.bias
  auto pbytes = protocol::encode_checkpoint(partial);
  REQUIRE(pbytes);
  auto pidx = protocol::index_checkpoint_streamed(whole_reader(*pbytes), pbytes->size(), "p");
  REQUIRE(pidx);
  int reads = 0;
  auto u = make(s, initial_weights::left_for_restore);
  const auto r2 = u->restore(*pidx, into_reader(*pbytes, &reads), "p");
  REQUIRE_FALSE(r2);
  CHECK_THAT(r2.error().message, Contains("no tensor \"layers.0.bias\""));
  CHECK(reads == 0);
  CHECK(u->awaiting_restore());
  auto other = small_spec();
  other.training->seed = 18;
  auto v = make(other);
  CHECK_FALSE(v->restore(*idx, into_reader(*bytes, &reads), "f"));
  CHECK(reads == 0);
  CHECK_FALSE(v->awaiting_restore());  // untouched: it keeps its own state
}

TEST_CASE("the data fingerprint is the digest of both matrices' shapes and values end to end",
          "[unit][trainer]") {
  // As protocol/README.md defines it, so checkpoints written by older builds still resume.
  const auto s = small_spec();
  const dataset d = data_for(s);
  std::string bytes;
  for (const auto* m : {&d.x, &d.y}) {
    const std::int64_t dims[2] = {m->rows(), m->cols()};
    bytes.append(reinterpret_cast<const char*>(dims), sizeof dims);
    bytes.append(reinterpret_cast<const char*>(m->data()),
                 static_cast<std::size_t>(m->size()) * sizeof(float));
  }
  auto t = make(s);
  CHECK(t->snapshot().metadata.at(trainer_meta::data_fingerprint) == protocol::xxh64_digest(bytes));
}
