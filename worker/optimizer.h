// The optimizer interface the trainer drives: bound once to a model's parameters (the model must
// outlive it), then step() after each train_step applies one update from the gradients. Updates
// run as one fused pass per parameter element, split over threads by fixed static partitions of
// all parameters laid end to end. State tensors are exposed by name for checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "protocol/job_spec.h"
#include "worker/parameter.h"

namespace baton::worker {

struct state_tensor {
  std::string name;  // "optimizer.layers.{i}.kernel.m", ...
  std::vector<std::int64_t> shape;
  std::span<float> value;  // read to checkpoint, written to resume
};

class optimizer {
 public:
  virtual ~optimizer() = default;

  // One update of every bound parameter from its current gradient; then iterations() += 1.
  // Equivalent to begin_update(), update() over every element, end_update().
  void step();

  // The same update in pieces, for a model that applies it while it computes the gradients
  // (model::train_step(x, y, opt)) so they never travel through memory: begin_update() once on
  // one thread, then update() exactly once for every element of every parameter (any thread,
  // disjoint ranges, any order), then end_update() once. Bit for bit the same as step().
  virtual void begin_update() = 0;
  // Updates elements [begin, end) of parameter k (index into the bound parameters) from `grad`,
  // which holds their gradients (grad[0] is element `begin`).
  virtual void update(std::size_t k, std::int64_t begin, std::int64_t end, const float* grad) = 0;
  void end_update() { ++iterations_; }

  // The bound parameters, in the order given at construction (update()'s k indexes these).
  const std::vector<parameter<float>>& bound_parameters() const { return params_; }

  // Updates applied so far (Keras's optimizer.iterations); restore it with the state on resume.
  std::int64_t iterations() const { return iterations_; }
  void set_iterations(std::int64_t n) { iterations_ = n; }

  virtual std::vector<state_tensor> state() = 0;

 protected:
  explicit optimizer(std::vector<parameter<float>> params);

  // Calls f(tensor, begin, end) over this thread's part of all elements laid end to end, for
  // every thread of the team, with a fixed partition per thread count.
  template <class F>
  void for_each_part(std::int64_t cost_per_element, F&& f);

  std::vector<parameter<float>> params_;
  std::vector<std::int64_t> offsets_;  // offsets_[k]: first flat index of params_[k]; back = total
  std::int64_t iterations_ = 0;
};

// An Adam or SGD optimizer per `spec` over `params` (model<float>::parameters()). Errors name the
// offending field of training.optimizer. Its state (moments, velocities) starts at zero, or
// uninitialised with storage_fill::uninitialised when a restore will overwrite all of it.
result<std::unique_ptr<optimizer>> make_optimizer(const protocol::optimizer_spec& spec,
                                                  std::vector<parameter<float>> params,
                                                  storage_fill fill = storage_fill::zeroed);

}  // namespace baton::worker
