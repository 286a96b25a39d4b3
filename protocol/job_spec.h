// A job spec is the typed form of one job's JSON document: what to train, on what data, and how
// the supervisor keeps the run alive (shards, memory budget, restarts). It is a plain value;
// parse_job_spec validates every field and reports all errors by JSON path. The field names are a
// user contract documented in protocol/README.md: fields may be added, never renamed.
// The built-in trainer needs data, model and training; a job with worker.command may leave them
// out (its trainer has its own notion of them) and carry its own settings in `params`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"

namespace baton::os {
class env;
}

namespace baton::protocol {

// Seed report generator: X ~ N(0, 1) of samples x features, y = (row sum > 0).
struct synthetic_data {
  std::int64_t samples = 5000;
  std::int64_t features = 100;
  std::uint64_t seed = 0;

  bool operator==(const synthetic_data&) const = default;
};

struct csv_data {
  std::filesystem::path path;  // absolute after parsing (resolved against the job file's folder)
  // A column name (needs a header) or a 0-based index; negative indexes count from the end.
  std::variant<std::int64_t, std::string> label_column = std::int64_t{-1};
  bool header = true;
  bool standardize = false;

  bool operator==(const csv_data&) const = default;
};

struct npy_data {
  std::filesystem::path features;  // absolute after parsing
  std::filesystem::path labels;

  bool operator==(const npy_data&) const = default;
};

using data_spec = std::variant<synthetic_data, csv_data, npy_data>;

enum class activation { relu, sigmoid, tanh, linear, softmax };

struct layer_spec {
  std::int64_t units = 0;
  activation act = activation::linear;

  bool operator==(const layer_spec&) const = default;
};

struct model_spec {
  std::vector<layer_spec> layers;
  std::optional<std::filesystem::path> initial_weights;  // safetensors, absolute after parsing

  bool operator==(const model_spec&) const = default;
};

enum class loss_kind { binary_crossentropy, categorical_crossentropy, mse };
enum class optimizer_kind { adam, sgd };

// Defaults are Keras 3's: Adam(0.001, 0.9, 0.999, 1e-7), SGD(0.01, momentum 0).
struct optimizer_spec {
  optimizer_kind kind = optimizer_kind::adam;
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double momentum = 0.0;
  bool nesterov = false;

  bool operator==(const optimizer_spec&) const = default;
};

struct training_spec {
  loss_kind loss = loss_kind::binary_crossentropy;
  optimizer_spec optimizer;
  std::int64_t batch_size = 32;
  std::int64_t epochs = 1;
  bool shuffle = true;
  std::uint64_t seed = 0;
  int threads = 0;  // 0: one per core
  double validation_split = 0.0;

  bool operator==(const training_spec&) const = default;
};

enum class shard_unit { epochs, steps };

struct shard_spec {
  shard_unit unit = shard_unit::epochs;
  std::int64_t count = 1;

  bool operator==(const shard_spec&) const = default;
};

struct memory_spec {
  std::optional<std::int64_t> soft_limit_mib;  // ask the worker to checkpoint and exit
  std::optional<std::int64_t> hard_limit_mib;  // kill the worker's process group at once
  std::int64_t poll_ms = 100;

  bool operator==(const memory_spec&) const = default;
};

struct restart_spec {
  int max_failures = 5;  // consecutive failures without the checkpoint advancing
  std::int64_t backoff_initial_ms = 1000;
  std::int64_t backoff_max_ms = 60000;
  double backoff_multiplier = 2.0;

  bool operator==(const restart_spec&) const = default;
};

struct checkpoint_spec {
  int keep = 2;

  bool operator==(const checkpoint_spec&) const = default;
};

struct worker_spec {
  std::optional<std::vector<std::string>> command;  // argv of an external trainer
  std::filesystem::path working_dir;       // where `command` runs; default: the job file's folder
  std::int64_t stall_timeout_ms = 120000;  // no message for this long: killed as hung
  std::int64_t stop_grace_ms = 30000;      // after `stop`, SIGKILL if still running
  // Environment variables for the worker, on top of the supervisor's (CUDA_VISIBLE_DEVICES,
  // OMP_NUM_THREADS, ...). Names are POSIX-portable ([A-Za-z_][A-Za-z0-9_]*) and never BATON_*,
  // which are the protocol's; values have no NUL byte. Sorted by name.
  std::map<std::string, std::string> env;
  // Python modules a fork server imports once for the whole job (os/preload_server.h): each shard
  // is then forked from it instead of started afresh. Needs a command [python, script, args...];
  // empty: every shard is a fresh process, imports and all.
  std::vector<std::string> preload;
  // Start each next worker while the current one saves (protocol/README.md, "Starting ahead").
  // Unset: yes for the built-in trainer, no for a worker.command (which must implement
  // BATON_START_AHEAD to say yes); never with preload, whose fork server forks ahead itself.
  std::optional<bool> start_ahead;

  bool operator==(const worker_spec&) const = default;
};

// Fault injection for tests; all off unless set.
struct debug_spec {
  double leak_mib_per_step = 0.0;
  std::optional<std::int64_t> crash_at_step;
  std::optional<std::int64_t> hang_at_step;

  bool operator==(const debug_spec&) const = default;
};

struct job_spec {
  std::string name;
  // Always set when worker.command is not (parse_job_spec requires data and model then, and
  // fills training's defaults); with a command, unset when the document leaves them out. A
  // default-constructed spec is a built-in job with every default, as before they were optional.
  std::optional<data_spec> data = data_spec{};
  std::optional<model_spec> model = model_spec{};
  std::optional<training_spec> training = training_spec{};
  shard_spec shard;
  memory_spec memory;
  restart_spec restart;
  checkpoint_spec checkpoints;
  worker_spec worker;
  debug_spec debug;
  // The trainer's own settings, any JSON value (an object is the expected use), kept verbatim;
  // baton never reads it. null: none, and to_json leaves it out.
  nlohmann::json params;

  bool operator==(const job_spec&) const = default;
};

// Every step count (training.epochs, shard.epochs, shard.steps, and epochs times steps per epoch
// where the spec gives both) is at most 10^12: at 100,000 steps a second that is 115 days, and
// totals, rates and ETAs computed from it stay far from int64's limits.
inline constexpr std::int64_t max_total_steps = 1'000'000'000'000;

// Limits on the document itself, checked before anything else.
inline constexpr std::size_t max_job_document_bytes = 1 << 20;
inline constexpr int max_job_document_depth = 64;
// worker.preload: what python/baton/preload.py takes (MAX_MODULES), and a sane name length.
inline constexpr std::size_t max_preload_modules = 64;
inline constexpr std::size_t max_preload_module_bytes = 200;

// Parses and validates a job document. Relative paths resolve against `base_dir` (the job
// file's folder). On failure the error message holds every problem, one per line, each naming
// the JSON path: `training.batch_size: expected a positive integer, got -3`.
result<job_spec> parse_job_spec(std::string_view text, const std::filesystem::path& base_dir);

// Reads and parses a job file; file errors name the file.
result<job_spec> load_job_spec(os::env& e, const std::filesystem::path& file);

// Checks that every file the job names (data files, initial weights) exists and is a regular
// file (or a symlink to one): a folder, a FIFO or a device is refused naming the field.
status check_job_files(os::env& e, const job_spec& spec);

// What the machine that runs the job offers.
struct machine_limits {
  unsigned cores = 1;
  std::uint64_t memory_bytes = 0;  // physical memory; 0: unknown, not checked
};
// This machine: std::thread::hardware_concurrency() and os::physical_memory_bytes().
machine_limits this_machine();
// At most this many training threads per core: more only adds switching (and at 10^6 threads the
// worker dies creating them).
inline constexpr int max_threads_per_core = 4;

// A lower bound on what the built-in trainer holds in memory for the job (float32 throughout):
// the parameters with their gradients and optimizer state (Adam's two moments, SGD's momentum),
// the synthetic data set, and one batch's activations and deltas. A data file's size is not
// known here, so csv and npy jobs count no data and only the layers after the first (their
// input width comes from the file).
struct memory_estimate {
  double parameters = 0;
  int bytes_per_parameter = 0;
  double parameter_bytes = 0;
  double data_bytes = 0;
  double activation_bytes = 0;
  double total_bytes = 0;
  std::string biggest_field;  // the field that accounts for most of it, for messages
};
memory_estimate estimate_memory(const job_spec& spec);

// Checks a parsed job against the machine before any run (validate, submit, run):
// training.threads at most max_threads_per_core per core, and the memory estimate within the
// job's own limit (memory.soft_limit_mib, else hard_limit_mib: a worker above it is recycled or
// killed before its first step) and within the machine's memory. Each error names the field and
// the estimate. Not part of parse_job_spec, which must not depend on the machine: a stored spec
// always loads again.
status check_job_limits(const job_spec& spec, const machine_limits& machine);

// Checks that the spec has what the built-in trainer needs (data, model, training): only a job
// with worker.command can lack them, and then baton-worker cannot train it.
status check_builtin_sections(const job_spec& spec);

// The job with every default filled in (sections a command worker's job left out stay out,
// params is copied as is); parse_job_spec(to_json(s).dump()) == s.
nlohmann::json to_json(const job_spec& spec);

// Training geometry derived from the spec (Keras semantics: validation is the last
// `validation_split` fraction of the samples, taken before shuffling).
struct job_geometry {
  std::int64_t train_samples = 0;
  std::int64_t validation_samples = 0;
  std::int64_t steps_per_epoch = 0;  // ceil(train_samples / batch_size)
  std::int64_t total_steps = 0;      // epochs * steps_per_epoch
  std::int64_t shard_steps = 0;      // shard length in steps

  bool operator==(const job_geometry&) const = default;
};
// Reads spec.training; without one it falls back to training's defaults rather than fail, but
// those describe no real trainer, so callers check spec.training first (planned_total_steps).
job_geometry compute_geometry(const job_spec& spec, std::int64_t samples);

// Total steps when the spec alone gives them (synthetic data and a training section); otherwise
// 0, and the worker reports them with its first progress message.
std::int64_t planned_total_steps(const job_spec& spec);

std::string_view to_string(activation a);
std::string_view to_string(loss_kind l);
std::string_view to_string(optimizer_kind o);

}  // namespace baton::protocol
