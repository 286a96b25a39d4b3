// The default worker's training loop with exact resume. A trainer owns one job's data, model and
// optimizer and advances them one optimizer step at a time in Keras Model.fit() order; its whole
// state at any step boundary round-trips through a protocol::checkpoint, so N steps in one
// process and the same N steps cut into resumed pieces give the same bits (same binary, machine
// and thread count). worker_main owns processes, files and messages; this file owns the math.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "protocol/checkpoint.h"
#include "protocol/job_spec.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/optimizer.h"
#include "worker/random.h"

namespace baton::os {
class env;
}

namespace baton::worker {

// Checkpoint metadata keys the trainer writes besides protocol::meta's.
namespace trainer_meta {
inline constexpr const char* step_in_epoch = "step_in_epoch";
inline constexpr const char* optimizer_iterations = "optimizer_iterations";
inline constexpr const char* epoch_loss_sum = "epoch_loss_sum";  // hex float, exact
inline constexpr const char* epoch_accuracy_sum = "epoch_accuracy_sum";
inline constexpr const char* epoch_samples = "epoch_samples";
inline constexpr const char* spec_fingerprint = "spec_fingerprint";
inline constexpr const char* data_fingerprint = "data_fingerprint";
inline constexpr const char* fingerprint_data = "fingerprint.data";
inline constexpr const char* fingerprint_model = "fingerprint.model";
inline constexpr const char* fingerprint_training = "fingerprint.training";
inline constexpr const char* total_steps = "total_steps";  // informational
}  // namespace trainer_meta

// What one step did, with the epoch's running means as Keras's progress bar shows them.
struct step_outcome {
  std::int64_t step = 0;   // global steps done, this one included
  std::int64_t epoch = 0;  // 0-based epoch the step belonged to
  std::int64_t batch_size = 0;
  double batch_loss = 0.0;
  double epoch_loss = 0.0;      // mean batch loss so far this epoch, weighted by batch size
  double epoch_accuracy = 0.0;  // likewise for accuracy
  bool epoch_end = false;       // the step was its epoch's last
  // Set after an epoch's last step when the job has validation data.
  std::optional<double> val_loss;
  std::optional<double> val_accuracy;
};

// Where create() takes the weights from. A worker that resumes overwrites every weight and all
// optimizer state in restore(), so drawing the Glorot init (or reading model.initial_weights),
// or even zeroing the buffers, first would be work thrown away: for the seed job most of a new
// worker's start-up.
enum class initial_weights {
  from_spec,  // model.initial_weights if set, else Glorot from training.seed; moments zero
  // None: weights and optimizer state are allocated uninitialised, and the trainer refuses to
  // step or snapshot (std::logic_error) until a restore() has written every one of them.
  left_for_restore,
  // As left_for_restore, but with every page of the storage faulted in (storage_fill::faulted_in):
  // for a worker started ahead, which has the time while the previous worker saves and none once
  // it resumes.
  faulted_in_for_restore,
};

class trainer {
 public:
  // Builds the model for `data` (which it keeps), binds the optimizer and sets the initial
  // weights as `init` says. Call set_thread_count first: the thread count is part of what makes
  // results reproducible.
  static result<std::unique_ptr<trainer>> create(const protocol::job_spec& spec, dataset data,
                                                 os::env& e,
                                                 initial_weights init = initial_weights::from_spec);

  // Replaces the whole training state with a checkpoint's after checking that it belongs to this
  // job spec and data (fingerprints), that every tensor has the expected name, dtype and shape,
  // and that its sample order is the one this build derives. On failure nothing is changed (a
  // trainer still awaiting its first restore keeps awaiting it). `what` names the checkpoint in
  // messages.
  status restore(const protocol::checkpoint& c, std::string_view what);
  status restore(const protocol::checkpoint_view& c, std::string_view what);
  // The same from a file index_checkpoint_streamed verified, whose tensors `read` reads: every
  // weight and moment goes straight from the file into the model's and optimizer's buffers
  // (protocol::read_checkpoint_tensors, which checks the file's digest again as the bytes land),
  // so no copy of the file is ever held. The header is checked whole before the first byte is
  // read, and a failure there changes nothing; a failed read or digest after that leaves the
  // trainer awaiting_restore() (its tensors partly written). With `both`, the hash runs beside
  // the reads (protocol::side_by_side).
  status restore(const protocol::checkpoint_index& c, const protocol::range_reader_into& read,
                 std::string_view what, const protocol::side_by_side* both = nullptr);

  // The state at the current step boundary as a checkpoint (tensor names in protocol/README.md).
  protocol::checkpoint snapshot();
  // The same state with tensors viewing the trainer's own buffers, for writing a checkpoint
  // without copying the model. Valid until the next run_step, restore or snapshot_view.
  protocol::checkpoint_view snapshot_view();

  // Runs the next step; requires !finished() and !awaiting_restore().
  step_outcome run_step();

  // Made with initial_weights::left_for_restore and not yet restored: the weights and optimizer
  // state are uninitialised memory, so run_step and the snapshots throw std::logic_error.
  bool awaiting_restore() const { return awaiting_restore_; }

  std::int64_t step() const { return step_; }
  bool finished() const { return step_ >= geometry_.total_steps; }
  const protocol::job_geometry& geometry() const { return geometry_; }
  std::int64_t epoch() const { return step_ / geometry_.steps_per_epoch; }
  // Running means of the current epoch (NaN before its first step).
  double epoch_loss() const;
  double epoch_accuracy() const;
  const std::vector<std::int64_t>& order() const { return order_; }

 private:
  trainer(const protocol::job_spec& spec, dataset data, std::unique_ptr<model<float>> m,
          std::unique_ptr<optimizer> opt, protocol::job_geometry g, bool awaiting_restore);
  void require_restored(const char* what) const;
  // What a checkpoint's header says, checked against this trainer (restore's first half).
  struct restore_plan;
  template <class C>
  result<restore_plan> plan_restore(const C& c, std::string_view what) const;
  // Restore's second half, once the tensors are in place and data.order and rng.state match.
  void finish_restore(restore_plan& p);
  // Sample order and sums for the epoch step_ belongs to.
  void begin_epoch();

  protocol::job_spec spec_;
  dataset data_;
  std::unique_ptr<model<float>> model_;  // heap: the optimizer holds views of its parameters
  std::unique_ptr<optimizer> opt_;
  protocol::job_geometry geometry_;
  std::string spec_fingerprint_, data_fingerprint_;

  bool awaiting_restore_ = false;
  std::int64_t step_ = 0;
  std::vector<std::int64_t> order_;       // this epoch's permutation of [0, train_samples)
  rng shuffle_rng_;                       // as left after drawing order_
  std::vector<std::uint64_t> rng_words_;  // shuffle_rng_'s state, viewed by snapshot_view
  double loss_sum_ = 0.0, accuracy_sum_ = 0.0;
  std::int64_t samples_ = 0;
  row_matrix<float> xb_, yb_;  // batch gather buffers, batch_size rows
};

// The epoch's sample order: Fisher-Yates from a generator seeded by (seed, epoch), or the
// identity when `shuffle` is false. `r` is left as the draw left it.
std::vector<std::int64_t> epoch_order(std::uint64_t seed, std::int64_t epoch, std::int64_t n,
                                      bool shuffle, rng& r);

// Where a worker starting at `step` stops: the next multiple of shard_steps after it, capped at
// total_steps (shards are aligned, so a shard cut short by a stop ends at the usual boundary).
std::int64_t shard_boundary(std::int64_t step, const protocol::job_geometry& g);

// xxh64 digests of the parts of a spec that change what training computes (data, model,
// training except threads). `section` is "data", "model", "training" or "" for all three.
std::string spec_fingerprint(const protocol::job_spec& spec, std::string_view section = "");

// Copies weights from a safetensors file (any writer; F32 or F64 layers.{i}.kernel
// [inputs, units] and layers.{i}.bias [units]) into `m`, after checking every name, dtype, shape
// and value. Other tensors (optimizer state...) are ignored. On failure `m` is unchanged.
status load_initial_weights(model<float>& m, const protocol::checkpoint& file,
                            std::string_view what);

// Exact text for doubles in metadata: hexadecimal floating point ("1.8p+1"), which
// Python's float.fromhex reads too.
std::string exact_double(double v);
result<double> parse_exact_double(std::string_view s);

}  // namespace baton::worker
