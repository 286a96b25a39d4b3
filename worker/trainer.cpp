#include "worker/trainer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "os/env.h"
#include "protocol/digest.h"

namespace baton::worker {

namespace {

using protocol::checkpoint;
using protocol::dtype;
using protocol::tensor;

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Appends rather than concatenating: GCC 12 -O3 reports a false -Wrestrict for "\"" + s.
std::string in_quotes(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

template <class T>
protocol::tensor_view make_view(std::string name, dtype type, std::vector<std::int64_t> shape,
                                const T* data, std::size_t count) {
  return {std::move(name), type, std::move(shape),
          std::string_view(reinterpret_cast<const char*>(data), count * sizeof(T))};
}

// Strict decimal metadata value.
result<std::int64_t> parse_count(const std::map<std::string, std::string>& metadata,
                                 const char* key, std::string_view what) {
  auto it = metadata.find(key);
  if (it == metadata.end()) {
    return make_error(std::string(what) + ": metadata has no " + in_quotes(key));
  }
  const std::string& s = it->second;
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0) {
    return make_error(std::string(what) + ": metadata " + key + " " + in_quotes(s) +
                      " is not a non-negative integer");
  }
  return v;
}

// Checks that tensor `name` of `c` (a checkpoint_view or checkpoint_index) exists with this
// dtype and shape.
template <class C>
status expect_tensor(const C& c, const std::string& name, dtype type,
                     const std::vector<std::int64_t>& shape, std::string_view what) {
  const auto* t = c.find(name);
  if (t == nullptr) return make_error(std::string(what) + ": no tensor " + in_quotes(name));
  if (t->type != type || t->shape != shape) {
    return make_error(std::string(what) + ": tensor " + in_quotes(name) + " is " +
                      std::string(to_string(t->type)) + " " + shape_string(t->shape) +
                      ", expected " + std::string(to_string(type)) + " " + shape_string(shape));
  }
  return {};
}

std::string data_fingerprint(const dataset& d) {
  // Streamed: the digest of the shapes and values laid end to end, without copying the data
  // into one string first (for the seed job a 2 MB copy that grew to 4 MB, in every worker).
  protocol::xxh64_stream h;
  const auto add = [&](const row_matrix<float>& m) {
    const std::int64_t dims[2] = {m.rows(), m.cols()};
    h.update(std::string_view(reinterpret_cast<const char*>(dims), sizeof dims));
    h.update(std::string_view(reinterpret_cast<const char*>(m.data()),
                              static_cast<std::size_t>(m.size()) * sizeof(float)));
  };
  add(d.x);
  add(d.y);
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh64:%016llx", static_cast<unsigned long long>(h.digest()));
  return buf;
}

}  // namespace

std::string exact_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::hex);
  if (ec != std::errc()) return "nan";
  return std::string(buf, end);
}

result<double> parse_exact_double(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::hex);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return make_error("expected a hexadecimal floating-point number, got " + in_quotes(s));
  }
  return v;
}

std::vector<std::int64_t> epoch_order(std::uint64_t seed, std::int64_t epoch, std::int64_t n,
                                      bool shuffle, rng& r) {
  // Domain-separated from init_glorot's rng(seed), and one independent stream per epoch.
  std::uint64_t st = seed ^ 0x5348554646'4c45ULL;  // "SHUFFLE"
  std::uint64_t epoch_state = splitmix64(st) + static_cast<std::uint64_t>(epoch);
  r = rng(splitmix64(epoch_state));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  if (shuffle) shuffle_indices(r, order.data(), n);
  return order;
}

std::int64_t shard_boundary(std::int64_t step, const protocol::job_geometry& g) {
  const std::int64_t next = (step / g.shard_steps + 1) * g.shard_steps;
  return std::min(next, g.total_steps);
}

std::string spec_fingerprint(const protocol::job_spec& spec, std::string_view section) {
  const nlohmann::json all = protocol::to_json(spec);
  nlohmann::json j = nlohmann::json::object();
  // A section the job leaves out (only possible with worker.command) fingerprints as null.
  for (const char* key : {"data", "model", "training"}) {
    j[key] = all.contains(key) ? all.at(key) : nlohmann::json();
  }
  // Threads change speed, not results a resume could notice (and a restart may pick another).
  if (j["training"].is_object()) j["training"].erase("threads");
  // nlohmann::json sorts keys, so the text is canonical.
  return protocol::xxh64_digest(section.empty() ? j.dump() : j.at(std::string(section)).dump());
}

status load_initial_weights(model<float>& m, const checkpoint& file, std::string_view what) {
  const std::string w(what);
  auto params = m.parameters();
  // Any layers.{i}.* the model does not have means the file is for another architecture.
  for (const auto& t : file.tensors) {
    if (t.name.rfind("layers.", 0) != 0) continue;
    const bool known =
        std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.name == t.name; });
    if (!known) {
      return make_error(w + ": tensor " + in_quotes(t.name) +
                        " does not belong to the model, which " + "has " +
                        std::to_string(m.layer_count()) + " layers (model.layers) with " +
                        "tensors layers.{i}.kernel and layers.{i}.bias");
    }
  }
  std::vector<std::vector<float>> values;
  for (const auto& p : params) {
    const std::string layer = "model.layers[" + p.name.substr(7, p.name.find('.', 7) - 7) + "]";
    const tensor* t = file.find(p.name);
    if (t == nullptr) {
      return make_error(w + ": no tensor " + in_quotes(p.name) + " (" + layer + " needs " +
                        shape_string(p.shape) + ")");
    }
    if (t->type != dtype::f32 && t->type != dtype::f64) {
      return make_error(w + ": tensor " + in_quotes(p.name) + " is " +
                        std::string(to_string(t->type)) + "; weights must be F32 or F64");
    }
    if (t->shape != p.shape) {
      return make_error(w + ": tensor " + in_quotes(p.name) + " has shape " +
                        shape_string(t->shape) + " but " + layer + " needs " +
                        shape_string(p.shape) +
                        (p.shape.size() == 2 ? " (inputs, units)" : " (units)"));
    }
    std::vector<float> v(p.value.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      double x = 0;
      if (t->type == dtype::f32) {
        float f;
        std::memcpy(&f, t->bytes.data() + i * 4, 4);
        x = f;
      } else {
        std::memcpy(&x, t->bytes.data() + i * 8, 8);
      }
      v[i] = static_cast<float>(x);
      if (!std::isfinite(v[i])) {
        return make_error(
            w + ": tensor " + in_quotes(p.name) + " element " + std::to_string(i) + " is " +
            std::to_string(x) +
            (std::isfinite(x) ? ", outside the float32 range" : "; weights must be finite"));
      }
    }
    values.push_back(std::move(v));
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::copy(values[k].begin(), values[k].end(), params[k].value.begin());
  }
  return {};
}

trainer::trainer(const protocol::job_spec& spec, dataset data, std::unique_ptr<model<float>> m,
                 std::unique_ptr<optimizer> opt, protocol::job_geometry g, bool awaiting_restore)
    : spec_(spec),
      data_(std::move(data)),
      model_(std::move(m)),
      opt_(std::move(opt)),
      geometry_(g),
      spec_fingerprint_(spec_fingerprint(spec)),
      data_fingerprint_(data_fingerprint(data_)),
      awaiting_restore_(awaiting_restore),
      shuffle_rng_(0) {
  xb_.resize(spec.training->batch_size, data_.x.cols());
  yb_.resize(spec.training->batch_size, data_.y.cols());
  begin_epoch();
}

result<std::unique_ptr<trainer>> trainer::create(const protocol::job_spec& spec, dataset data,
                                                 os::env& e, initial_weights init) {
  if (auto ok = protocol::check_builtin_sections(spec); !ok) return ok.error();
  if (data.x.rows() != data.y.rows()) {
    return make_error("data: " + std::to_string(data.x.rows()) + " feature rows but " +
                      std::to_string(data.y.rows()) + " label rows");
  }
  const auto g = protocol::compute_geometry(spec, data.x.rows());
  if (g.train_samples <= 0) {
    return make_error(
        "training.validation_split: " + std::to_string(spec.training->validation_split) + " of " +
        std::to_string(data.x.rows()) + " samples leaves no training sample");
  }
  if (g.steps_per_epoch <= 0 || g.total_steps <= 0 || g.shard_steps <= 0) {
    return make_error("job geometry is empty: steps_per_epoch " +
                      std::to_string(g.steps_per_epoch) + ", total_steps " +
                      std::to_string(g.total_steps) + ", shard_steps " +
                      std::to_string(g.shard_steps));
  }
  // A resume writes every weight and moment in restore(): nothing to zero before that.
  const storage_fill fill = init == initial_weights::left_for_restore ? storage_fill::uninitialised
                            : init == initial_weights::faulted_in_for_restore
                                ? storage_fill::faulted_in
                                : storage_fill::zeroed;
  const bool for_restore = init != initial_weights::from_spec;
  auto m = model<float>::create(*spec.model, data.x.cols(), spec.training->loss,
                                spec.training->batch_size, fill);
  if (!m) return m.error();
  if (auto ok = m->check_data_shape(data.x.cols(), data.y.cols()); !ok) return ok.error();
  auto owned = std::make_unique<model<float>>(std::move(*m));
  if (for_restore) {
    // Nothing to draw or read: restore() overwrites every parameter.
  } else if (spec.model->initial_weights) {
    const std::string what = spec.model->initial_weights->string();
    auto bytes = e.read_file(*spec.model->initial_weights);
    if (!bytes) return with_context("model.initial_weights", bytes.error());
    auto file = protocol::decode_safetensors(*bytes, what);
    if (!file) return with_context("model.initial_weights", file.error());
    if (auto ok = load_initial_weights(*owned, *file, what); !ok) {
      return with_context("model.initial_weights", ok.error());
    }
  } else {
    owned->init_glorot(spec.training->seed);
  }
  auto opt = make_optimizer(spec.training->optimizer, owned->parameters(), fill);
  if (!opt) return opt.error();
  return std::unique_ptr<trainer>(
      new trainer(spec, std::move(data), std::move(owned), std::move(*opt), g, for_restore));
}

void trainer::require_restored(const char* what) const {
  // A caller bug, not an input error: the state is uninitialised memory, and stepping or saving
  // it would spread garbage into a checkpoint that verifies.
  if (awaiting_restore_) {
    throw std::logic_error(std::string("trainer::") + what +
                           " before a successful restore (made with left_for_restore)");
  }
}

void trainer::begin_epoch() {
  order_ = epoch_order(spec_.training->seed, epoch(), geometry_.train_samples,
                       spec_.training->shuffle, shuffle_rng_);
  loss_sum_ = 0.0;
  accuracy_sum_ = 0.0;
  samples_ = 0;
}

double trainer::epoch_loss() const {
  return samples_ > 0 ? loss_sum_ / static_cast<double>(samples_)
                      : std::numeric_limits<double>::quiet_NaN();
}

double trainer::epoch_accuracy() const {
  return samples_ > 0 ? accuracy_sum_ / static_cast<double>(samples_)
                      : std::numeric_limits<double>::quiet_NaN();
}

step_outcome trainer::run_step() {
  require_restored("run_step");
  const std::int64_t spe = geometry_.steps_per_epoch;
  const std::int64_t batch = spec_.training->batch_size;
  const std::int64_t k = step_ % spe;
  const std::int64_t begin = k * batch;
  const std::int64_t rows = std::min(batch, geometry_.train_samples - begin);
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto src = order_[static_cast<std::size_t>(begin + i)];
    xb_.row(i) = data_.x.row(src);
    yb_.row(i) = data_.y.row(src);
  }
  const const_matrix_map<float> xm(xb_.data(), rows, xb_.cols());
  const const_matrix_map<float> ym(yb_.data(), rows, yb_.cols());
  // The fused step: gradients go into the optimizer while in cache (bit for bit the same as
  // train_step + step). Keras reports the accuracy of the predictions the step trained on, i.e.
  // with the weights before the update, which the forward pass counted.
  const double loss = model_->train_step(xm, ym, *opt_);
  const accuracy_count hits = model_->last_step_accuracy();
  const double accuracy =
      hits.total > 0 ? static_cast<double>(hits.correct) / static_cast<double>(hits.total) : 0.0;

  const auto r = static_cast<double>(rows);
  loss_sum_ += loss * r;
  accuracy_sum_ += accuracy * r;
  samples_ += rows;

  step_outcome out;
  out.epoch = epoch();
  out.batch_size = rows;
  out.batch_loss = loss;
  out.epoch_loss = epoch_loss();
  out.epoch_accuracy = epoch_accuracy();
  ++step_;
  out.step = step_;
  if (k == spe - 1) {
    out.epoch_end = true;
    if (geometry_.validation_samples > 0) {
      const idx n = static_cast<idx>(geometry_.train_samples);
      const idx v = static_cast<idx>(geometry_.validation_samples);
      const const_matrix_map<float> xv(data_.x.data() + n * data_.x.cols(), v, data_.x.cols());
      const const_matrix_map<float> yv(data_.y.data() + n * data_.y.cols(), v, data_.y.cols());
      const evaluation val = model_->evaluate(xv, yv);
      out.val_loss = val.loss;
      out.val_accuracy = val.accuracy;
    }
    begin_epoch();
  }
  return out;
}

protocol::checkpoint_view trainer::snapshot_view() {
  require_restored("snapshot_view");
  protocol::checkpoint_view c;
  const std::int64_t spe = geometry_.steps_per_epoch;
  c.metadata[protocol::meta::job] = spec_.name;
  c.metadata[protocol::meta::step] = std::to_string(step_);
  c.metadata[protocol::meta::epoch] = std::to_string(step_ / spe);
  c.metadata[trainer_meta::step_in_epoch] = std::to_string(step_ % spe);
  c.metadata[trainer_meta::optimizer_iterations] = std::to_string(opt_->iterations());
  c.metadata[trainer_meta::epoch_loss_sum] = exact_double(loss_sum_);
  c.metadata[trainer_meta::epoch_accuracy_sum] = exact_double(accuracy_sum_);
  c.metadata[trainer_meta::epoch_samples] = std::to_string(samples_);
  c.metadata[trainer_meta::spec_fingerprint] = spec_fingerprint_;
  c.metadata[trainer_meta::fingerprint_data] = spec_fingerprint(spec_, "data");
  c.metadata[trainer_meta::fingerprint_model] = spec_fingerprint(spec_, "model");
  c.metadata[trainer_meta::fingerprint_training] = spec_fingerprint(spec_, "training");
  c.metadata[trainer_meta::data_fingerprint] = data_fingerprint_;
  c.metadata[trainer_meta::total_steps] = std::to_string(geometry_.total_steps);

  for (const auto& p : model_->parameters()) {
    c.tensors.push_back(make_view(p.name, dtype::f32, p.shape, p.value.data(), p.value.size()));
  }
  for (const auto& s : opt_->state()) {
    c.tensors.push_back(make_view(s.name, dtype::f32, s.shape, s.value.data(), s.value.size()));
  }
  c.tensors.push_back(make_view("data.order", dtype::i64,
                                {static_cast<std::int64_t>(order_.size())}, order_.data(),
                                order_.size()));
  const auto words = shuffle_rng_.state();
  rng_words_.assign(words.begin(), words.end());
  c.tensors.push_back(make_view("rng.state", dtype::u64,
                                {static_cast<std::int64_t>(rng_words_.size())}, rng_words_.data(),
                                rng_words_.size()));
  return c;
}

checkpoint trainer::snapshot() {
  protocol::checkpoint_view v = snapshot_view();
  checkpoint c;
  c.metadata = std::move(v.metadata);
  c.tensors.resize(v.tensors.size());
  for (std::size_t i = 0; i < v.tensors.size(); ++i) {
    tensor& t = c.tensors[i];
    t.name = std::move(v.tensors[i].name);
    t.type = v.tensors[i].type;
    t.shape = std::move(v.tensors[i].shape);
    t.bytes.assign(v.tensors[i].bytes.data(), v.tensors[i].bytes.size());
  }
  return c;
}

status trainer::restore(const checkpoint& c, std::string_view what) {
  return restore(protocol::view_of(c), what);
}

struct trainer::restore_plan {
  std::int64_t step = 0, iterations = 0, samples = 0;
  double sums[2] = {0, 0};
  // Every weight and optimizer state tensor, by name, and where its bytes go.
  std::vector<std::pair<std::string, std::span<float>>> targets;
  std::vector<std::int64_t> order;  // the sample order this build derives for the epoch
  rng derived{0};                   // as left after drawing it
};

template <class C>
result<trainer::restore_plan> trainer::plan_restore(const C& c, std::string_view what) const {
  const std::string w(what);
  const auto fail = [&](const std::string& msg) { return make_error(w + ": " + msg); };

  auto job = c.metadata.find(protocol::meta::job);
  if (job == c.metadata.end()) return fail("metadata has no \"job\"");
  if (job->second != spec_.name) {
    return fail("checkpoint belongs to job " + in_quotes(job->second) + ", not " +
                in_quotes(spec_.name));
  }
  auto fp = c.metadata.find(trainer_meta::spec_fingerprint);
  if (fp == c.metadata.end()) return fail("metadata has no \"spec_fingerprint\"");
  if (fp->second != spec_fingerprint_) {
    std::string changed;
    for (const char* section : {"data", "model", "training"}) {
      auto it = c.metadata.find(std::string("fingerprint.") + section);
      if (it == c.metadata.end() || it->second != spec_fingerprint(spec_, section)) {
        changed += (changed.empty() ? "" : ", ") + std::string(section);
      }
    }
    return fail("the job spec changed since this checkpoint was written (" +
                (changed.empty() ? std::string("data, model or training") : changed) +
                " differ; training.threads may change); resuming would not reproduce the run. " +
                "Restore the original spec, or start over without these checkpoints");
  }
  auto dfp = c.metadata.find(trainer_meta::data_fingerprint);
  if (dfp == c.metadata.end()) return fail("metadata has no \"data_fingerprint\"");
  if (dfp->second != data_fingerprint_) {
    return fail("the training data changed since this checkpoint was written (data digest " +
                dfp->second + ", now " + data_fingerprint_ + ")");
  }

  restore_plan p;
  const std::int64_t spe = geometry_.steps_per_epoch;
  auto step = parse_count(c.metadata, protocol::meta::step, what);
  if (!step) return step.error();
  if (*step > geometry_.total_steps) {
    return fail("step " + std::to_string(*step) + " is past the job's last step " +
                std::to_string(geometry_.total_steps));
  }
  auto ep = parse_count(c.metadata, protocol::meta::epoch, what);
  if (!ep) return ep.error();
  auto sie = parse_count(c.metadata, trainer_meta::step_in_epoch, what);
  if (!sie) return sie.error();
  if (*ep != *step / spe || *sie != *step % spe) {
    return fail("epoch " + std::to_string(*ep) + " and step_in_epoch " + std::to_string(*sie) +
                " do not match step " + std::to_string(*step) + " at " + std::to_string(spe) +
                " steps per epoch");
  }
  auto iters = parse_count(c.metadata, trainer_meta::optimizer_iterations, what);
  if (!iters) return iters.error();
  auto samples = parse_count(c.metadata, trainer_meta::epoch_samples, what);
  if (!samples) return samples.error();
  const std::int64_t expected_samples =
      std::min(*sie * spec_.training->batch_size, geometry_.train_samples);
  if (*samples != expected_samples) {
    return fail("epoch_samples " + std::to_string(*samples) + " does not match " +
                std::to_string(*sie) + " steps into the epoch (" +
                std::to_string(expected_samples) + ")");
  }
  const char* sum_keys[2] = {trainer_meta::epoch_loss_sum, trainer_meta::epoch_accuracy_sum};
  for (int i = 0; i < 2; ++i) {
    auto it = c.metadata.find(sum_keys[i]);
    if (it == c.metadata.end())
      return fail(std::string("metadata has no ") + in_quotes(sum_keys[i]));
    auto v = parse_exact_double(it->second);
    if (!v) return fail(std::string("metadata ") + sum_keys[i] + ": " + v.error().message);
    p.sums[i] = *v;
  }
  p.step = *step;
  p.iterations = *iters;
  p.samples = *samples;

  // Every tensor, checked before any is touched: each weight and moment must be there, so none
  // is left as it was (uninitialised memory, in a trainer made for the restore).
  for (const auto& prm : model_->parameters()) {
    if (auto t = expect_tensor(c, prm.name, dtype::f32, prm.shape, what); !t) return t.error();
    p.targets.emplace_back(prm.name, prm.value);
  }
  for (const auto& st : opt_->state()) {
    if (auto t = expect_tensor(c, st.name, dtype::f32, st.shape, what); !t) return t.error();
    p.targets.emplace_back(st.name, st.value);
  }
  if (auto t = expect_tensor(c, "data.order", dtype::i64, {geometry_.train_samples}, what); !t) {
    return t.error();
  }
  if (auto t = expect_tensor(c, "rng.state", dtype::u64,
                             {static_cast<std::int64_t>(rng::state_words{}.size())}, what);
      !t) {
    return t.error();
  }
  p.order = epoch_order(spec_.training->seed, *step / spe, geometry_.train_samples,
                        spec_.training->shuffle, p.derived);
  return p;
}

void trainer::finish_restore(restore_plan& p) {
  opt_->set_iterations(p.iterations);
  step_ = p.step;
  order_ = std::move(p.order);
  shuffle_rng_ = p.derived;
  loss_sum_ = p.sums[0];
  accuracy_sum_ = p.sums[1];
  samples_ = p.samples;
  awaiting_restore_ = false;
}

namespace {

// The order is derived, not free: a mismatch means another build's shuffle or a damaged file.
bool same_order(const std::vector<std::int64_t>& order, const rng& derived,
                std::string_view order_bytes, std::string_view rng_bytes) {
  rng::state_words words{};
  if (order_bytes.size() != order.size() * sizeof(std::int64_t) ||
      rng_bytes.size() != sizeof words) {
    return false;
  }
  std::memcpy(words.data(), rng_bytes.data(), sizeof words);
  return std::memcmp(order.data(), order_bytes.data(), order_bytes.size()) == 0 &&
         derived.state() == words;
}

std::string order_mismatch(std::string_view what, std::int64_t epoch) {
  return std::string(what) +
         ": data.order and rng.state are not the sample order this worker derives for epoch " +
         std::to_string(epoch) + " (written by a different baton-worker build?)";
}

}  // namespace

status trainer::restore(const protocol::checkpoint_view& c, std::string_view what) {
  auto p = plan_restore(c, what);
  if (!p) return p.error();
  if (!same_order(p->order, p->derived, c.find("data.order")->bytes, c.find("rng.state")->bytes)) {
    return make_error(order_mismatch(what, p->step / geometry_.steps_per_epoch));
  }
  for (auto& [name, dst] : p->targets) {
    std::memcpy(dst.data(), c.find(name)->bytes.data(), dst.size_bytes());
  }
  finish_restore(*p);
  return {};
}

status trainer::restore(const protocol::checkpoint_index& c,
                        const protocol::range_reader_into& read, std::string_view what,
                        const protocol::side_by_side* both) {
  auto p = plan_restore(c, what);
  if (!p) return p.error();
  std::vector<std::int64_t> order(p->order.size());
  rng::state_words words{};
  std::map<std::string_view, std::span<char>> into;
  for (auto& [name, dst] : p->targets) {
    into[name] = std::span<char>(reinterpret_cast<char*>(dst.data()), dst.size_bytes());
  }
  into["data.order"] =
      std::span<char>(reinterpret_cast<char*>(order.data()), order.size() * sizeof order[0]);
  into["rng.state"] = std::span<char>(reinterpret_cast<char*>(words.data()), sizeof words);
  // From here the tensors are being overwritten: until this succeeds they are no state at all.
  awaiting_restore_ = true;
  const auto dest = [&](const protocol::tensor_extent& t) -> std::span<char> {
    auto it = into.find(t.name);
    return it == into.end() ? std::span<char>() : it->second;  // others: read, hashed, dropped
  };
  if (auto s = protocol::read_checkpoint_tensors(c, read, dest, what, 1 << 20, both); !s) {
    return s;
  }
  const std::string_view order_bytes(reinterpret_cast<const char*>(order.data()),
                                     order.size() * sizeof order[0]);
  const std::string_view rng_bytes(reinterpret_cast<const char*>(words.data()), sizeof words);
  if (!same_order(p->order, p->derived, order_bytes, rng_bytes)) {
    return make_error(order_mismatch(what, p->step / geometry_.steps_per_epoch));
  }
  finish_restore(*p);
  return {};
}

}  // namespace baton::worker
