// A feed-forward stack of dense layers with a loss: the trainer's view of the network. The model
// owns layers, gradients and every buffer a step needs, all sized for `max_batch` at creation, so
// train_step and evaluate never allocate. Parameters are named `layers.{i}.kernel|bias` for
// checkpoints; optimizers (worker/optimizer.h) update them from the gradients train_step leaves.
#pragma once

#include <concepts>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "protocol/job_spec.h"
#include "worker/dense_layer.h"
#include "worker/loss.h"
#include "worker/parameter.h"
#include "worker/tensor.h"

namespace baton::worker {

class optimizer;

struct evaluation {
  double loss = 0.0;      // mean over samples
  double accuracy = 0.0;  // Keras "accuracy" (see loss_function::accuracy)
  std::int64_t samples = 0;
};

template <class S>
class model {
 public:
  // Layers from `spec` (the initial_weights file, if any, is the trainer's to load through
  // parameters()). Parameters start at zero (call init_glorot or load them), or uninitialised
  // with storage_fill::uninitialised, for a caller that overwrites every one before use.
  static result<model> create(const protocol::model_spec& spec, idx inputs, loss_kind loss,
                              idx max_batch, storage_fill fill = storage_fill::zeroed);

  // Glorot & Bengio (AISTATS 2010) uniform init, Keras's default: kernel ~ U(-l, l) with
  // l = sqrt(6 / (fan_in + fan_out)), drawn row-major layer by layer from rng(seed); biases 0.
  void init_glorot(std::uint64_t seed);

  // Forward, loss and backward over one batch (rows <= max_batch, contiguous row-major); leaves
  // dL/dparameter in parameters()[k].grad and returns the mean loss of the batch.
  double train_step(const_matrix_map<S> x, const_matrix_map<S> y);

  // train_step(x, y) followed by opt.step(), bit for bit, for an optimizer made from this model's
  // parameters() (float only). Faster: each block of gradients goes straight into the update while
  // it is in cache, so parameters()[k].grad is NOT written (it keeps older values). An optimizer
  // bound to other tensors gets the plain train_step + step().
  double train_step(const_matrix_map<S> x, const_matrix_map<S> y,
                    optimizer& opt) requires std::same_as<S, float>;

  // Keras's training accuracy of the last train_step: its predictions, made with the weights from
  // before the update, against its targets. Free: counted from the forward pass's outputs.
  accuracy_count last_step_accuracy() const { return last_hits_; }

  // Loss and accuracy over any number of rows, in max_batch chunks through the same buffers.
  evaluation evaluate(const_matrix_map<S> x, const_matrix_map<S> y);

  // Activated outputs for rows <= max_batch; valid until the next call on this model.
  const_matrix_map<S> predict_batch(const_matrix_map<S> x);

  // Clear errors for data that does not fit the model, for the trainer to check once up front.
  status check_data_shape(idx features, idx label_columns) const;

  // In layer order: layers.0.kernel, layers.0.bias, layers.1.kernel, ... The gradients are
  // unspecified until the first plain train_step writes them (dense_layer leaves them unzeroed).
  std::vector<parameter<S>> parameters();
  std::int64_t parameter_count() const;

  idx inputs() const { return inputs_; }
  idx outputs() const { return layers_.back().units(); }
  idx max_batch() const { return layers_.front().max_batch(); }
  std::size_t layer_count() const { return layers_.size(); }
  dense_layer<S>& layer(std::size_t i) { return layers_[i]; }
  const loss_function<S>& loss() const { return loss_; }

 private:
  model(idx inputs, std::vector<dense_layer<S>> layers, loss_function<S> loss);
  const_matrix_map<S> forward(const_matrix_map<S> x);
  // The whole step inside one parallel region: forward, loss, backward (with `sinks`, one per
  // layer, the fused update). Returns the mean loss.
  double step(const_matrix_map<S> x, const_matrix_map<S> y, const gradient_sink<S>* sinks);
  std::int64_t flops_per_row() const;
  // Sizes scratch_ for thread_count() threads (allocates only when that grows). Outside a team.
  void reserve_scratch();

  idx inputs_;
  std::vector<dense_layer<S>> layers_;
  // One backward scratch for all layers, a stride per thread: the layers' backward passes run
  // one after another, each ending at a barrier, so they take turns at the same memory (for the
  // seed job 380 KiB less resident than one scratch per layer).
  std::vector<S> scratch_;
  std::size_t scratch_stride_ = 0;
  accuracy_count last_hits_{};
  loss_function<S> loss_;
};

}  // namespace baton::worker
