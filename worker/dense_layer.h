// One fully connected layer, Y = act(X W + b), with the kernel laid out [inputs x units] as Keras
// stores it. The layer owns its parameters, their gradients and max-batch-sized output and
// output-gradient buffers; its standalone passes own their per-thread scratch too, while a team
// pass borrows the caller's (a model shares one scratch among its layers, which take turns at
// it). Every pass works on the first `rows` rows of
// those buffers, so no pass allocates (short final batches included). The model owns the order of
// calls. The products run on the layer's own register-blocked kernels (dense_layer.cpp): each
// output element is one sequential sum in a register, and threads split outputs, never sums.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/activation.h"
#include "worker/large_matrix.h"
#include "worker/parallel.h"
#include "worker/parameter.h"
#include "worker/tensor.h"

namespace baton::worker {

// Where a fused backward pass hands each finished gradient block (model::train_step with an
// optimizer): apply(ctx, k, begin, end, grad) updates elements [begin, end) of parameter k.
template <class S>
struct gradient_sink {
  void (*apply)(void* ctx, std::size_t k, std::int64_t begin, std::int64_t end, const S* grad);
  void* ctx;
  std::size_t kernel_index;  // this layer's kernel and bias among the optimizer's parameters
  std::size_t bias_index;
};

// Whether a layer's backward pass computes dL/dX. The first layer of a model never does (nothing
// below it wants its input's gradient), so it keeps no dZ^T buffer: for the seed job that is
// 250 KiB of resident memory and a write pass of every step saved.
enum class input_gradient { computed, not_needed };

template <class S>
class dense_layer {
 public:
  // Kernel and bias start as `fill` says. Their gradients start uninitialised whatever `fill`:
  // every backward pass writes them whole before anything reads them, and the fused step never
  // touches them at all, so they never cost resident memory there (a fresh worker and a resumed
  // one use the same). The pass buffers are zeroed. With input_gradient::not_needed, backward
  // must not be given a `dx`; the layer may still be another's `lower` (its dL/dZ is written).
  dense_layer(idx inputs, idx units, activation act, idx max_batch,
              storage_fill fill = storage_fill::zeroed,
              input_gradient input_grad = input_gradient::computed);

  idx inputs() const { return kernel_.view().rows(); }
  idx units() const { return kernel_.view().cols(); }
  idx max_batch() const { return out_.rows(); }
  activation act() const { return act_; }

  // Z = X W + b with the activation fused into the bias pass (Rumelhart, Hinton & Williams 1986).
  // With `apply_activation` false the output stays Z: the loss consumes logits. x.rows() must be
  // at most max_batch().
  const_matrix_map<S> forward(const_matrix_map<S> x, bool apply_activation = true);

  // Applies the activation to an output left as logits by forward(x, false) (for predictions).
  void activate_output();

  // The output of the last forward, and the buffer where the caller (the loss, or the next
  // layer's backward) writes dL/d(output) for the same rows.
  const_matrix_map<S> output() const { return {out_.data(), rows_, units()}; }
  matrix_map<S> output_grad() { return {out_grad_.data(), rows_, units()}; }
  S* output_grad_data() { return out_grad_.data(); }

  // From output_grad() (dL/dY, or dL/dZ when `grad_is_preactivation`), turned into dL/dZ in place:
  //   dW = X^T dZ,  db = column sums of dZ,  and when `dx` is not null dX = dZ W^T written to dx
  //   (x.rows() x inputs(), row-major). `x` is the same input the forward pass saw.
  void backward(const_matrix_map<S> x, bool grad_is_preactivation, S* dx);

  // The same passes for a team already running: every thread of `t` calls with the same
  // arguments and they return after a barrier, with the result complete. forward_team leaves
  // the output as Z when `apply_activation` is false.
  void forward_team(const_matrix_map<S> x, bool apply_activation, const team& t);
  // Turns output_grad() into dL/dZ (unless `grad_is_preactivation`) and lays out its transpose
  // for backward_team. One thread, no barrier: for the top layer, right after the loss.
  void prepare_output_grad(bool grad_is_preactivation);
  // From a prepared dL/dZ: dW, db and, with `lower` (the layer below, whose output was `x`), that
  // layer's dL/dZ, prepared in the same pass (its activation's derivative applied; softmax takes
  // two more barriers); or with `dx` alone, dL/dX written raw. With `sink`, dW and db go to the
  // sink block by block instead of into kernel_grad() and bias_grad() (dX is computed from each
  // kernel block before the sink sees that block). `scratch` is this thread's own, at least
  // scratch_size() elements, untouched by any other thread until the closing barrier.
  void backward_team(const_matrix_map<S> x, const team& t, S* scratch, const gradient_sink<S>* sink,
                     dense_layer* lower, S* dx = nullptr);

  // Elements of scratch one thread's backward_team needs: a block of dW rows and of dX^T rows.
  idx scratch_size() const;

  matrix_map<S>& kernel() { return kernel_.view(); }
  row_vector<S>& bias() { return bias_; }
  const matrix_map<S>& kernel() const { return kernel_.view(); }
  const row_vector<S>& bias() const { return bias_; }
  row_matrix<S>& kernel_grad() { return kernel_grad_; }
  row_vector<S>& bias_grad() { return bias_grad_; }

 private:
  activation act_;
  idx rows_ = 0;      // rows of the last forward pass
  idx padded_batch_;  // max_batch rounded up to the SIMD width
  large_matrix<S> kernel_;
  row_vector<S> bias_;
  row_matrix<S> kernel_grad_;
  row_vector<S> bias_grad_;
  row_matrix<S> out_;       // max_batch x units
  row_matrix<S> out_grad_;  // max_batch x units
  // units x padded_batch: dZ^T, zero-padded, for dX = dZ W^T; empty without an input gradient.
  row_matrix<S> grad_t_;
  std::vector<S> scratch_;  // backward()'s, scratch_size() per thread; empty until it runs
};

}  // namespace baton::worker
