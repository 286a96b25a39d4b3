// Validation of job documents. Three passes: document limits (size, then the JSON kit's SAX pass
// for depth, syntax and duplicate keys, so nothing deep or ambiguous ever reaches the DOM), then
// a typed walk that records every problem by JSON path instead of stopping at the first, then
// cross-field rules that only make sense once each field is known to be valid on its own.
#include "protocol/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <span>
#include <thread>

#include "os/env.h"
#include "os/system.h"
#include "protocol/document_file.h"
#include "protocol/field_checker.h"
#include "protocol/json_parse.h"

namespace baton::protocol {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::int64_t int_max = std::numeric_limits<int>::max();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
// 2^63 as a double: every double below it in magnitude with no fraction is an int64 (past 2^53
// all doubles are integers, just not every integer is a double).
constexpr double two_to_the_63 = 9223372036854775808.0;

// ---------------------------------------------------------------------------------------------
// Pass 2: the typed walk.

constexpr std::string_view activation_names[] = {"relu", "sigmoid", "tanh", "linear", "softmax"};
constexpr std::string_view loss_names[] = {"binary_crossentropy", "categorical_crossentropy",
                                           "mse"};
constexpr std::string_view optimizer_names[] = {"adam", "sgd"};
constexpr std::string_view data_type_names[] = {"synthetic", "csv", "npy"};

constexpr std::string_view top_keys[] = {"name",   "data",   "model",   "training",
                                         "shard",  "memory", "restart", "checkpoints",
                                         "worker", "debug",  "params"};
constexpr std::string_view synthetic_keys[] = {"type", "samples", "features", "seed"};
constexpr std::string_view csv_keys[] = {"type", "path", "label_column", "header", "standardize"};
constexpr std::string_view npy_keys[] = {"type", "features", "labels"};
constexpr std::string_view any_data_keys[] = {"type",        "samples", "features",
                                              "seed",        "path",    "header",
                                              "standardize", "labels",  "label_column"};
constexpr std::string_view model_keys[] = {"layers", "initial_weights"};
constexpr std::string_view layer_keys[] = {"units", "activation"};
constexpr std::string_view training_keys[] = {
    "loss", "optimizer", "batch_size", "epochs", "shuffle", "seed", "threads", "validation_split"};
constexpr std::string_view adam_keys[] = {"type", "learning_rate", "beta_1", "beta_2", "epsilon"};
constexpr std::string_view sgd_keys[] = {"type", "learning_rate", "momentum", "nesterov"};
constexpr std::string_view any_optimizer_keys[] = {"type",    "learning_rate", "beta_1",  "beta_2",
                                                   "epsilon", "momentum",      "nesterov"};
constexpr std::string_view shard_keys[] = {"epochs", "steps"};
constexpr std::string_view memory_keys[] = {"soft_limit_mib", "hard_limit_mib", "poll_ms"};
constexpr std::string_view restart_keys[] = {"max_failures", "backoff_initial_ms", "backoff_max_ms",
                                             "backoff_multiplier"};
constexpr std::string_view checkpoint_keys[] = {"keep"};
constexpr std::string_view worker_keys[] = {
    "command", "working_dir", "stall_timeout_ms", "stop_grace_ms", "env", "preload", "start_ahead"};
constexpr std::string_view debug_keys[] = {"leak_mib_per_step", "crash_at_step", "hang_at_step"};

// Windows refuses these as file names whatever the extension; job names become folder names.
bool is_reserved_device_name(std::string_view name) {
  std::string stem(name.substr(0, name.find('.')));
  std::transform(stem.begin(), stem.end(), stem.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::set<std::string> reserved = {
      "con",  "prn",  "aux",  "nul",  "com1", "com2", "com3", "com4", "com5", "com6", "com7",
      "com8", "com9", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9"};
  return reserved.contains(stem);
}

// Integer constraint: a lower bound with its wording, and an upper bound of the C++ field.
struct int_rule {
  std::int64_t min;
  std::int64_t max;
  const char* expected;
};
constexpr int_rule positive_int{1, int64_max, "a positive integer"};
constexpr int_rule positive_small_int{1, int_max, "a positive integer"};
constexpr int_rule non_negative_int{0, int64_max, "a non-negative integer"};
constexpr int_rule non_negative_small_int{0, int_max, "a non-negative integer"};
// Step counts (and epochs, each at least one step): bounded so totals, rates and ETAs stay
// meaningful and nothing multiplied from them nears int64.
constexpr int_rule step_count{1, max_total_steps, "a positive integer"};

struct double_rule {
  bool (*ok)(double);
  const char* expected;
};
constexpr double_rule positive_number{[](double v) { return v > 0; }, "a positive number"};
constexpr double_rule non_negative_number{[](double v) { return v >= 0; }, "a non-negative number"};
constexpr double_rule unit_interval{[](double v) { return v >= 0 && v < 1; }, "a number in [0, 1)"};
constexpr double_rule at_least_one{[](double v) { return v >= 1; }, "a number >= 1"};

class checker {
 public:
  explicit checker(fs::path base_dir) : base_dir_(std::move(base_dir)) {}

  std::vector<std::string>& errors() { return errors_; }

  void fail(const std::string& path, const std::string& what) {
    errors_.push_back((path.empty() ? std::string("(document)") : path) + ": " + what);
  }
  void expected(const std::string& path, std::string_view what, const json& got) {
    fail(path, "expected " + std::string(what) + ", got " + describe(got));
  }
  void missing(const std::string& path, std::string_view what) {
    fail(path, "missing, expected " + std::string(what));
  }

  // True if `j` is an object; reports every key outside `keys`.
  bool object(const json& j, const std::string& path, std::span<const std::string_view> keys) {
    if (!j.is_object()) {
      expected(path, "an object", j);
      return false;
    }
    for (const auto& key : unknown_keys(j, keys)) {
      // A trainer's settings put inside a section are the likely mistake, not a typo.
      fail(child_path(path, key),
           key == "params" && !path.empty()
               ? std::string("unknown key; \"params\" belongs at the top level of the job")
               : "unknown key; " + suggestion(key, keys));
    }
    return true;
  }

  // Integer from any JSON number that holds one exactly (1e3 is 1000, 1e18 is 10^18; 32.5 is an
  // error), then range-checked by the field's rule like any integer.
  static std::optional<std::int64_t> as_int64(const json& v) {
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(int64_max)) return static_cast<std::int64_t>(u);
      return std::nullopt;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::floor(d) == d && d >= -two_to_the_63 && d < two_to_the_63) {
        return static_cast<std::int64_t>(d);
      }
    }
    return std::nullopt;
  }

  bool int_value(const json& v, const std::string& path, const int_rule& rule, std::int64_t& out) {
    const auto i = as_int64(v);
    if (!i && v.is_number_unsigned()) {  // a positive integer, only past int64
      expected(path, std::string(rule.expected) + " no larger than " + std::to_string(rule.max), v);
      return false;
    }
    if (!i || *i < rule.min) {
      expected(path, rule.expected, v);
      return false;
    }
    if (*i > rule.max) {
      expected(path, std::string(rule.expected) + " no larger than " + std::to_string(rule.max), v);
      return false;
    }
    out = *i;
    return true;
  }

  void int_field(const json& obj, std::string_view key, const std::string& parent,
                 const int_rule& rule, std::int64_t& out) {
    if (auto it = obj.find(key); it != obj.end())
      int_value(*it, child_path(parent, key), rule, out);
  }
  void int_field(const json& obj, std::string_view key, const std::string& parent,
                 const int_rule& rule, int& out) {
    std::int64_t wide = out;
    int_field(obj, key, parent, rule, wide);
    out = static_cast<int>(wide);  // rule.max keeps it in range
  }
  // null means "not set".
  void optional_int_field(const json& obj, std::string_view key, const std::string& parent,
                          const int_rule& rule, std::optional<std::int64_t>& out) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    std::int64_t v = 0;
    if (int_value(*it, child_path(parent, key), rule, v)) out = v;
  }

  void uint64_field(const json& obj, std::string_view key, const std::string& parent,
                    std::uint64_t& out) {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (it->is_number_unsigned()) {
      out = it->get<std::uint64_t>();
    } else if (auto i = as_int64(*it); i && *i >= 0) {
      out = static_cast<std::uint64_t>(*i);
    } else {
      expected(child_path(parent, key), "a non-negative integer", *it);
    }
  }

  void double_field(const json& obj, std::string_view key, const std::string& parent,
                    const double_rule& rule, double& out) {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (!it->is_number() || !rule.ok(it->get<double>())) {
      expected(child_path(parent, key), rule.expected, *it);
      return;
    }
    out = it->get<double>();
  }

  void bool_field(const json& obj, std::string_view key, const std::string& parent, bool& out) {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (!it->is_boolean()) {
      expected(child_path(parent, key), "true or false", *it);
      return;
    }
    out = it->get<bool>();
  }

  // A file path; relative ones resolve against the job file's folder.
  std::optional<fs::path> path_value(const json& v, const std::string& path) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      expected(path, "a file path", v);
      return std::nullopt;
    }
    const fs::path p(v.get_ref<const std::string&>());
    return (p.is_absolute() ? p : base_dir_ / p).lexically_normal();
  }
  void required_path_field(const json& obj, std::string_view key, const std::string& parent,
                           fs::path& out) {
    const auto path = child_path(parent, key);
    auto it = obj.find(key);
    if (it == obj.end()) return missing(path, "a file path");
    if (auto p = path_value(*it, path)) out = *p;
  }

  // Name lookup with a suggestion; returns the index into `names`.
  std::optional<std::size_t> name_value(const json& v, const std::string& path,
                                        std::string_view noun,
                                        std::span<const std::string_view> names) {
    if (!v.is_string()) {
      expected(path, std::string(noun) + " name (one of " + one_of(names) + ")", v);
      return std::nullopt;
    }
    const auto& s = v.get_ref<const std::string&>();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s) return i;
    }
    fail(path, "unknown " + std::string(noun) + " " + describe(v) + "; " + suggestion(s, names));
    return std::nullopt;
  }

  // ---- sections ----

  void name(const json& doc, std::string& out) {
    auto it = doc.find("name");
    if (it == doc.end()) return missing("name", "a job name");
    if (!it->is_string()) return expected("name", "a job name (a string)", *it);
    const auto& s = it->get_ref<const std::string&>();
    const auto got = describe(*it);
    if (s.empty() || s.size() > 64) {
      return fail("name", "expected 1 to 64 characters, got " + std::to_string(s.size()));
    }
    for (const char c : s) {
      const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
      if (!ok) {
        const auto shown = (c >= 0x20 && c < 0x7f)
                               ? "'" + std::string(1, c) + "'"
                               : "byte " + std::to_string(static_cast<unsigned char>(c));
        return fail("name", "character " + shown + " not allowed in " + got +
                                "; a job name is a folder name: use A-Z a-z 0-9 . _ -");
      }
    }
    if (s.front() == '.') return fail("name", "must not start with '.', got " + got);
    if (s.back() == '.') return fail("name", "must not end with '.', got " + got);
    if (is_reserved_device_name(s)) return fail("name", "reserved device name on Windows: " + got);
    out = s;
  }

  void data(const json& doc, data_spec& out) {
    auto it = doc.find("data");
    if (it == doc.end()) return missing("data", "an object with \"type\" " + type_list());
    const json& d = *it;
    if (!d.is_object()) return expected("data", "an object", d);
    auto type_it = d.find("type");
    std::optional<std::size_t> type;
    if (type_it == d.end()) {
      missing("data.type", "one of " + one_of(data_type_names));
    } else {
      type = name_value(*type_it, "data.type", "data type", data_type_names);
    }
    if (!type) {
      object(d, "data", any_data_keys);  // still report typos without knowing the type
      return;
    }
    if (*type == 0) {
      synthetic_data s;
      object(d, "data", synthetic_keys);
      int_field(d, "samples", "data", positive_int, s.samples);
      int_field(d, "features", "data", positive_int, s.features);
      uint64_field(d, "seed", "data", s.seed);
      out = s;
    } else if (*type == 1) {
      csv_data c;
      object(d, "data", csv_keys);
      required_path_field(d, "path", "data", c.path);
      bool_field(d, "header", "data", c.header);
      bool_field(d, "standardize", "data", c.standardize);
      if (auto lc = d.find("label_column"); lc != d.end()) {
        if (lc->is_string() && !lc->get_ref<const std::string&>().empty()) {
          c.label_column = lc->get<std::string>();
          if (!c.header) fail("data.label_column", "a column name needs data.header true");
        } else if (auto i = as_int64(*lc)) {
          c.label_column = *i;
        } else {
          expected("data.label_column", "a column name or a 0-based column index", *lc);
        }
      }
      out = c;
    } else {
      npy_data n;
      object(d, "data", npy_keys);
      required_path_field(d, "features", "data", n.features);
      required_path_field(d, "labels", "data", n.labels);
      out = n;
    }
  }

  void model(const json& doc, model_spec& out) {
    auto it = doc.find("model");
    if (it == doc.end()) return missing("model", "an object with \"layers\"");
    const json& m = *it;
    const std::size_t errors_before = errors_.size();
    if (!object(m, "model", model_keys)) return;
    auto layers = m.find("layers");
    if (layers == m.end()) {
      missing("model.layers", "a non-empty array of layers");
    } else if (!layers->is_array() || layers->empty()) {
      expected("model.layers", "a non-empty array of layers", *layers);
    } else {
      for (std::size_t i = 0; i < layers->size(); ++i) {
        const auto path = index_path("model.layers", i);
        const json& l = (*layers)[i];
        layer_spec layer;
        if (object(l, path, layer_keys)) {
          auto units = l.find("units");
          if (units == l.end()) {
            missing(child_path(path, "units"), "a positive integer");
          } else {
            int_value(*units, child_path(path, "units"), positive_int, layer.units);
          }
          if (auto a = l.find("activation"); a != l.end()) {
            if (auto idx = name_value(*a, child_path(path, "activation"), "activation",
                                      activation_names)) {
              layer.act = static_cast<activation>(*idx);
            }
          }
        }
        out.layers.push_back(layer);
      }
    }
    if (auto w = m.find("initial_weights"); w != m.end() && !w->is_null()) {
      out.initial_weights = path_value(*w, "model.initial_weights");
    }
    model_valid_ = errors_.size() == errors_before && !out.layers.empty();
  }

  void optimizer(const json& t, optimizer_spec& out) {
    auto it = t.find("optimizer");
    if (it == t.end()) return;
    const std::string path = "training.optimizer";
    // Keras accepts an optimizer by name; so do we, with that optimizer's defaults.
    if (it->is_string()) {
      if (auto idx = name_value(*it, path, "optimizer", optimizer_names)) {
        out = defaults_for(static_cast<optimizer_kind>(*idx));
      }
      return;
    }
    if (!it->is_object()) return expected(path, "an optimizer name or object", *it);
    const json& o = *it;
    auto type_it = o.find("type");
    std::optional<std::size_t> type;
    if (type_it == o.end()) {
      missing(path + ".type", "one of " + one_of(optimizer_names));
    } else {
      type = name_value(*type_it, path + ".type", "optimizer", optimizer_names);
    }
    if (!type) {
      object(o, path, any_optimizer_keys);
      return;
    }
    out = defaults_for(static_cast<optimizer_kind>(*type));
    if (out.kind == optimizer_kind::adam) {
      object(o, path, adam_keys);
      double_field(o, "beta_1", path, unit_interval, out.beta_1);
      double_field(o, "beta_2", path, unit_interval, out.beta_2);
      double_field(o, "epsilon", path, positive_number, out.epsilon);
    } else {
      object(o, path, sgd_keys);
      double_field(o, "momentum", path, unit_interval, out.momentum);
      bool_field(o, "nesterov", path, out.nesterov);
    }
    double_field(o, "learning_rate", path, positive_number, out.learning_rate);
  }

  static optimizer_spec defaults_for(optimizer_kind kind) {
    optimizer_spec o;
    o.kind = kind;
    if (kind == optimizer_kind::sgd) o.learning_rate = 0.01;  // keras.optimizers.SGD default
    return o;
  }

  void training(const json& doc, training_spec& out) {
    auto it = doc.find("training");
    if (it == doc.end()) return;
    const json& t = *it;
    if (!object(t, "training", training_keys)) return;
    if (auto l = t.find("loss"); l != t.end()) {
      loss_given_ = true;
      if (auto idx = name_value(*l, "training.loss", "loss", loss_names)) {
        out.loss = static_cast<loss_kind>(*idx);
      } else {
        loss_valid_ = false;
      }
    }
    optimizer(t, out.optimizer);
    int_field(t, "batch_size", "training", positive_int, out.batch_size);
    const std::size_t errors_before_epochs = errors_.size();
    int_field(t, "epochs", "training", step_count, out.epochs);
    epochs_valid_ = errors_.size() == errors_before_epochs;
    bool_field(t, "shuffle", "training", out.shuffle);
    uint64_field(t, "seed", "training", out.seed);
    int_field(t, "threads", "training", non_negative_small_int, out.threads);
    double_field(t, "validation_split", "training", unit_interval, out.validation_split);
  }

  void shard(const json& doc, shard_spec& out) {
    auto it = doc.find("shard");
    if (it == doc.end()) return;
    if (!object(*it, "shard", shard_keys)) return;
    const bool epochs = it->contains("epochs"), steps = it->contains("steps");
    if (epochs == steps) {
      return fail("shard", std::string("expected exactly one of \"epochs\" or \"steps\", got ") +
                               (epochs ? "both" : "neither"));
    }
    out.unit = epochs ? shard_unit::epochs : shard_unit::steps;
    int_field(*it, epochs ? "epochs" : "steps", "shard", step_count, out.count);
  }

  void memory(const json& doc, memory_spec& out) {
    auto it = doc.find("memory");
    if (it == doc.end()) return;
    if (!object(*it, "memory", memory_keys)) return;
    optional_int_field(*it, "soft_limit_mib", "memory", positive_int, out.soft_limit_mib);
    optional_int_field(*it, "hard_limit_mib", "memory", positive_int, out.hard_limit_mib);
    int_field(*it, "poll_ms", "memory", positive_int, out.poll_ms);
    if (out.soft_limit_mib && out.hard_limit_mib && *out.soft_limit_mib > *out.hard_limit_mib) {
      fail("memory.soft_limit_mib", "must not exceed memory.hard_limit_mib, got " +
                                        std::to_string(*out.soft_limit_mib) + " > " +
                                        std::to_string(*out.hard_limit_mib));
    }
  }

  void restart(const json& doc, restart_spec& out) {
    auto it = doc.find("restart");
    if (it == doc.end()) return;
    if (!object(*it, "restart", restart_keys)) return;
    const json& r = *it;
    int_field(r, "max_failures", "restart", positive_small_int, out.max_failures);
    const bool initial_ok = !r.contains("backoff_initial_ms") ||
                            int_value(r["backoff_initial_ms"], "restart.backoff_initial_ms",
                                      positive_int, out.backoff_initial_ms);
    const bool max_ok =
        !r.contains("backoff_max_ms") ||
        int_value(r["backoff_max_ms"], "restart.backoff_max_ms", positive_int, out.backoff_max_ms);
    double_field(r, "backoff_multiplier", "restart", at_least_one, out.backoff_multiplier);
    if (initial_ok && max_ok && out.backoff_initial_ms > out.backoff_max_ms) {
      fail("restart.backoff_initial_ms", "must not exceed restart.backoff_max_ms, got " +
                                             std::to_string(out.backoff_initial_ms) + " > " +
                                             std::to_string(out.backoff_max_ms));
    }
  }

  void checkpoints(const json& doc, checkpoint_spec& out) {
    auto it = doc.find("checkpoints");
    if (it == doc.end()) return;
    if (!object(*it, "checkpoints", checkpoint_keys)) return;
    int_field(*it, "keep", "checkpoints", positive_small_int, out.keep);
  }

  void worker(const json& doc, worker_spec& out) {
    // External trainers run from the job file's folder unless told otherwise, so a command
    // like ["python3", "train.py"] finds its script next to the job file.
    out.working_dir = base_dir_;
    auto it = doc.find("worker");
    if (it == doc.end()) return;
    if (!object(*it, "worker", worker_keys)) return;
    const json& w = *it;
    if (auto c = w.find("command"); c != w.end() && !c->is_null()) {
      const bool ok =
          c->is_array() && !c->empty() &&
          std::all_of(c->begin(), c->end(), [](const json& a) { return a.is_string(); });
      if (!ok) {
        expected("worker.command", "null or a non-empty array of strings (argv)", *c);
      } else if ((*c)[0].get_ref<const std::string&>().empty()) {
        fail("worker.command[0]", "expected the program to run, got \"\"");
      } else {
        out.command = c->get<std::vector<std::string>>();
      }
    }
    if (auto d = w.find("working_dir"); d != w.end() && !d->is_null()) {
      if (auto p = path_value(*d, "worker.working_dir")) out.working_dir = *p;
    }
    int_field(w, "stall_timeout_ms", "worker", positive_int, out.stall_timeout_ms);
    int_field(w, "stop_grace_ms", "worker", non_negative_int, out.stop_grace_ms);
    if (auto e = w.find("env"); e != w.end() && !e->is_null()) {
      if (!e->is_object()) {
        expected("worker.env", "an object of NAME: \"value\" strings", *e);
        return;
      }
      for (const auto& [name, value] : e->items()) {
        const std::string where = "worker.env." + name;
        const bool portable = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                              std::all_of(name.begin(), name.end(), [](char c) {
                                return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                              });
        if (!portable) {
          fail(where, "a variable name is letters, digits and _, not starting with a digit");
        } else if (name.rfind("BATON_", 0) == 0) {
          fail(where, "BATON_* variables are set by baton for the worker protocol");
        } else if (!value.is_string()) {
          expected(where, "a string", value);
        } else if (value.get_ref<const std::string&>().find('\0') != std::string::npos) {
          fail(where, "a value cannot hold a NUL byte");
        } else {
          out.env[name] = value.get<std::string>();
        }
      }
    }
    if (auto p = w.find("preload"); p != w.end() && !p->is_null()) preload(*p, out);
    if (auto a = w.find("start_ahead"); a != w.end() && !a->is_null()) {
      if (!a->is_boolean()) {
        expected("worker.start_ahead", "true, false or null", *a);
      } else if (a->get<bool>() && !out.preload.empty()) {
        fail("worker.start_ahead",
             "cannot be true with worker.preload: the fork server forks each shard ahead itself");
      } else {
        out.start_ahead = a->get<bool>();
      }
    }
  }

  // A module name as Python's import takes it: dotted identifiers (ASCII here).
  static bool module_name(const std::string& n) {
    if (n.empty() || n.size() > max_preload_module_bytes) return false;
    bool start = true;
    for (const char c : n) {
      const bool letter = std::isalpha(static_cast<unsigned char>(c)) || c == '_';
      if (c == '.') {
        if (start) return false;
        start = true;
      } else if (letter || (!start && std::isdigit(static_cast<unsigned char>(c)))) {
        start = false;
      } else {
        return false;
      }
    }
    return !start;
  }

  void preload(const json& p, worker_spec& out) {
#ifdef _WIN32
    (void)out;
    if (!p.is_array() || !p.empty()) {
      fail("worker.preload", "not supported on Windows: the fork server forks each shard");
    }
#else
    if (!p.is_array()) {
      expected("worker.preload", "an array of module names ([\"torch\"])", p);
      return;
    }
    if (p.size() > max_preload_modules) {
      fail("worker.preload", "at most " + std::to_string(max_preload_modules) + " modules, got " +
                                 std::to_string(p.size()));
      return;
    }
    const auto errors_before = errors_.size();
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::string where = "worker.preload[" + std::to_string(i) + "]";
      if (!p[i].is_string()) {
        expected(where, "a module name", p[i]);
      } else if (!module_name(p[i].get_ref<const std::string&>())) {
        fail(where, "a module name is dotted identifiers (\"torch\", \"torch.nn\"), at most " +
                        std::to_string(max_preload_module_bytes) + " bytes");
      } else {
        out.preload.push_back(p[i].get<std::string>());
      }
    }
    // Half a list is no list: the cross-section checks look only at a valid one.
    if (errors_.size() != errors_before) out.preload.clear();
#endif
  }

  void debug(const json& doc, debug_spec& out) {
    auto it = doc.find("debug");
    if (it == doc.end()) return;
    if (!object(*it, "debug", debug_keys)) return;
    double_field(*it, "leak_mib_per_step", "debug", non_negative_number, out.leak_mib_per_step);
    optional_int_field(*it, "crash_at_step", "debug", non_negative_int, out.crash_at_step);
    optional_int_field(*it, "hang_at_step", "debug", non_negative_int, out.hang_at_step);
  }

  // Pass 3: rules across sections, only between fields that were valid on their own, and only
  // between sections the job has (a command worker may leave model or training out).
  void cross_checks(const job_spec& s) {
    if (!s.worker.preload.empty()) {
      const auto& c = s.worker.command;
      if (!c) {
        fail("worker.preload",
             "needs worker.command [python, script, args...]: the fork server "
             "is a Python parent that runs the script in each shard");
      } else if (c->size() < 2 || (*c)[1].empty() || (*c)[1][0] == '-') {
        fail("worker.preload",
             "needs worker.command [python, script, args...] with the script second (the fork "
             "server runs it as __main__; interpreter options go in worker.env, e.g. "
             "PYTHONUNBUFFERED), got " +
                 (c->size() < 2 ? std::string("no script") : "\"" + (*c)[1] + "\""));
      }
    }
    if (loss_valid_ && model_valid_ && s.model && s.training) {
      const auto& last = s.model->layers.back();
      auto where = " (" + index_path("model.layers", s.model->layers.size() - 1) + ")";
      if (!loss_given_) where += "; training.loss defaults to binary_crossentropy";
      const auto got = ", got units " + std::to_string(last.units) + " and activation " +
                       std::string(to_string(last.act)) + where;
      if (s.training->loss == loss_kind::binary_crossentropy &&
          (last.units != 1 || last.act != activation::sigmoid)) {
        fail("training.loss",
             "binary_crossentropy needs a last layer with units 1 and activation sigmoid" + got);
      } else if (s.training->loss == loss_kind::categorical_crossentropy &&
                 (last.units < 2 || last.act != activation::softmax)) {
        fail("training.loss",
             "categorical_crossentropy needs a last layer with activation softmax and units >= 2" +
                 got);
      }
    }
    if (const auto* syn = s.data ? std::get_if<synthetic_data>(&*s.data) : nullptr;
        syn && s.training && s.training->validation_split > 0) {
      const auto train = compute_geometry(s, syn->samples).train_samples;
      if (train < 1) {
        fail("training.validation_split",
             "leaves no training samples of data.samples " + std::to_string(syn->samples));
      }
    }
    if (const auto* syn = s.data ? std::get_if<synthetic_data>(&*s.data) : nullptr;
        syn && s.training && epochs_valid_) {
      const auto g = compute_geometry(s, syn->samples);
      // compute_geometry saturates at int64's maximum, so this also catches an overflow.
      if (g.total_steps > max_total_steps) {
        fail("training.epochs", std::to_string(s.training->epochs) + " epochs of " +
                                    std::to_string(g.steps_per_epoch) + " steps are " +
                                    (g.total_steps == int64_max ? std::string("past 2^63")
                                                                : std::to_string(g.total_steps)) +
                                    " steps; a job may have at most " +
                                    std::to_string(max_total_steps) + " (10^12)");
      }
    }
  }

 private:
  static std::string type_list() { return "(" + one_of(data_type_names) + ")"; }

  fs::path base_dir_;
  std::vector<std::string> errors_;
  bool loss_valid_ = true;
  bool loss_given_ = false;
  bool model_valid_ = false;
  bool epochs_valid_ = true;
};

json path_json(const fs::path& p) { return p.generic_string(); }

// A command worker's job may leave out the built-in trainer's sections. An invalid command
// still counts: the user meant a command worker, and its own error says what is wrong.
bool names_a_command(const json& doc) {
  const auto w = doc.find("worker");
  if (w == doc.end() || !w->is_object()) return false;
  const auto c = w->find("command");
  return c != w->end() && !c->is_null();
}

}  // namespace

result<job_spec> parse_job_spec(std::string_view text, const fs::path& base_dir) {
  const json_scan scan =
      scan_json(text, json_limits{.max_bytes = max_job_document_bytes,
                                  .max_depth = static_cast<std::size_t>(max_job_document_depth),
                                  .collect_duplicates = true});
  if (scan.fault && scan.fault->what == json_fault::kind::too_large) {
    return make_error("document is " + std::to_string(text.size()) +
                      " bytes; a job document may be at most " +
                      std::to_string(max_job_document_bytes) + " bytes (1 MiB)");
  }
  if (scan.fault && scan.fault->what == json_fault::kind::too_deep) {
    return make_error("document nests deeper than " + std::to_string(max_job_document_depth) +
                      " levels at " + line_column(text, scan.fault->offset));
  }
  if (scan.fault && scan.fault->message.empty()) return make_error("invalid JSON");
  if (scan.fault) {
    return make_error("invalid JSON at " + line_column(text, scan.fault->offset) + ": " +
                      scan.fault->reason);
  }
  if (!scan.duplicates.empty()) {
    std::vector<std::string> lines;
    for (const auto& d : scan.duplicates) lines.push_back(d.path + ": duplicate key");
    return make_error(join_lines(lines));
  }

  const json doc = build_scanned_json(text);
  checker c(base_dir);
  job_spec spec;
  if (!c.object(doc, "", top_keys)) return make_error(join_lines(c.errors()));
  c.name(doc, spec.name);
  const bool optional_sections = names_a_command(doc);
  spec.data.reset();
  spec.model.reset();
  spec.training.reset();
  // Without a command, a missing data or model is reported by the section itself and a
  // missing training takes every default.
  if (!optional_sections || doc.contains("data")) c.data(doc, spec.data.emplace());
  if (!optional_sections || doc.contains("model")) c.model(doc, spec.model.emplace());
  if (!optional_sections || doc.contains("training")) c.training(doc, spec.training.emplace());
  c.shard(doc, spec.shard);
  c.memory(doc, spec.memory);
  c.restart(doc, spec.restart);
  c.checkpoints(doc, spec.checkpoints);
  c.worker(doc, spec.worker);
  c.debug(doc, spec.debug);
  if (auto p = doc.find("params"); p != doc.end()) spec.params = *p;
  c.cross_checks(spec);
  if (!c.errors().empty()) return make_error(join_lines(c.errors()));
  return spec;
}

result<job_spec> load_job_spec(os::env& e, const fs::path& file) {
  return load_document(e, file, "job file", parse_job_spec);
}

status check_job_files(os::env& e, const job_spec& spec) {
  std::vector<std::string> errors;
  const auto need = [&](const std::string& json_path, const fs::path& p) {
    auto info = e.stat_no_follow(p);
    if (!info) {
      // An env that cannot tell (none of baton's own) falls back to existence alone.
      if (!e.file_exists(p)) errors.push_back(json_path + ": file not found: " + p.string());
      return;
    }
    os::entry_kind kind = info->kind;
    if (kind == os::entry_kind::symlink) {
      // Only a real file system has links; follow this one to see what the worker will open.
      std::error_code ec;
      const auto st = fs::status(p, ec);
      kind = ec || st.type() == fs::file_type::not_found ? os::entry_kind::missing
             : st.type() == fs::file_type::regular       ? os::entry_kind::regular
             : st.type() == fs::file_type::directory     ? os::entry_kind::directory
                                                         : os::entry_kind::other;
    }
    switch (kind) {
      case os::entry_kind::regular:
        return;
      case os::entry_kind::missing:
        errors.push_back(json_path + ": file not found: " + p.string());
        return;
      case os::entry_kind::directory:
        errors.push_back(json_path + ": expected a regular file, got a folder: " + p.string());
        return;
      default:
        errors.push_back(json_path +
                         ": expected a regular file, got a FIFO, socket or device: " + p.string());
        return;
    }
  };
  if (spec.data) {
    if (const auto* c = std::get_if<csv_data>(&*spec.data)) need("data.path", c->path);
    if (const auto* n = std::get_if<npy_data>(&*spec.data)) {
      need("data.features", n->features);
      need("data.labels", n->labels);
    }
  }
  if (spec.model && spec.model->initial_weights) {
    need("model.initial_weights", *spec.model->initial_weights);
  }
  if (!errors.empty()) return make_error(join_lines(errors));
  return {};
}

namespace {

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t u = 0;
  while (bytes >= 1024 && u + 1 < std::size(units)) {
    bytes /= 1024;
    ++u;
  }
  if (bytes >= 1024) return "more than 1024 EiB";
  char text[64];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

std::string format_count(double n) {
  char text[64];
  if (n < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", n);
  } else {
    std::snprintf(text, sizeof text, "%.3g", n);
  }
  return text;
}

}  // namespace

memory_estimate estimate_memory(const job_spec& spec) {
  memory_estimate m;
  if (!spec.model || spec.model->layers.empty()) return m;
  constexpr double float_bytes = 4;
  double input = 0;  // unknown for data files: the first layer's weights are not counted
  double samples = 0;
  if (spec.data) {
    if (const auto* syn = std::get_if<synthetic_data>(&*spec.data)) {
      input = static_cast<double>(syn->features);
      samples = static_cast<double>(syn->samples);
    }
  }
  const training_spec training = spec.training.value_or(training_spec{});
  const auto& o = training.optimizer;
  // Weights and gradients, then the optimizer's state per parameter.
  m.bytes_per_parameter = 8 + (o.kind == optimizer_kind::adam ? 8 : o.momentum > 0 ? 4 : 0);
  const double batch = static_cast<double>(training.batch_size);
  double biggest_layer = -1;
  double units_sum = 0;
  for (std::size_t i = 0; i < spec.model->layers.size(); ++i) {
    const double units = static_cast<double>(spec.model->layers[i].units);
    const double params = input * units + units;
    m.parameters += params;
    units_sum += units;
    // Weights and state plus this layer's share of the batch's activations.
    const double bytes = params * m.bytes_per_parameter + batch * units * float_bytes * 3;
    if (bytes > biggest_layer) {
      biggest_layer = bytes;
      m.biggest_field = index_path("model.layers", i) + ".units";
    }
    input = units;
  }
  m.parameter_bytes = m.parameters * m.bytes_per_parameter;
  const double features = spec.data && std::holds_alternative<synthetic_data>(*spec.data)
                              ? static_cast<double>(std::get<synthetic_data>(*spec.data).features)
                              : 0;
  m.data_bytes = samples * (features + 1) * float_bytes;
  // Pre-activations, activations and deltas of one batch.
  m.activation_bytes = batch * units_sum * float_bytes * 3;
  m.total_bytes = m.parameter_bytes + m.data_bytes + m.activation_bytes;
  if (m.data_bytes > m.parameter_bytes + m.activation_bytes) {
    m.biggest_field = "data.samples";
  } else if (m.activation_bytes > m.parameter_bytes && training.batch_size > 65536) {
    m.biggest_field = "training.batch_size";  // a batch no data set needs, not a wide layer
  }
  return m;
}

status check_job_limits(const job_spec& spec, const machine_limits& machine) {
  std::vector<std::string> errors;
  if (spec.training && spec.training->threads > 0) {
    const std::int64_t cores = std::max(1u, machine.cores);
    const std::int64_t most = cores * max_threads_per_core;
    if (spec.training->threads > most) {
      errors.push_back("training.threads: at most " + std::to_string(most) + " (" +
                       std::to_string(max_threads_per_core) + " per core; this machine has " +
                       std::to_string(cores) + (cores == 1 ? " core" : " cores") + "), got " +
                       std::to_string(spec.training->threads) + "; 0 uses one per core");
    }
  }
  const auto m = estimate_memory(spec);
  if (m.total_bytes > 0) {
    const std::string estimate =
        "the job needs at least " + format_bytes(m.total_bytes) + " (" +
        format_count(m.parameters) + " parameters x " + std::to_string(m.bytes_per_parameter) +
        " bytes for weights, gradients" +
        (m.bytes_per_parameter == 16   ? " and Adam's two moments"
         : m.bytes_per_parameter == 12 ? " and momentum"
                                       : "") +
        " = " + format_bytes(m.parameter_bytes) + ", data " + format_bytes(m.data_bytes) +
        ", one batch's activations " + format_bytes(m.activation_bytes) + ")";
    constexpr double mib = 1024.0 * 1024.0;
    const auto& mem = spec.memory;
    std::optional<std::int64_t> limit =
        mem.soft_limit_mib ? mem.soft_limit_mib : mem.hard_limit_mib;
    if (limit && m.total_bytes > static_cast<double>(*limit) * mib) {
      errors.push_back(m.biggest_field + ": " + estimate + ", more than memory." +
                       (mem.soft_limit_mib ? "soft_limit_mib " : "hard_limit_mib ") +
                       std::to_string(*limit) + " MiB");
    } else if (machine.memory_bytes > 0 &&
               m.total_bytes > static_cast<double>(machine.memory_bytes)) {
      errors.push_back(m.biggest_field + ": " + estimate + ", more than this machine's " +
                       format_bytes(static_cast<double>(machine.memory_bytes)) + " of memory");
    }
  }
  if (!errors.empty()) return make_error(join_lines(errors));
  return {};
}

machine_limits this_machine() {
  machine_limits m;
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  m.memory_bytes = os::physical_memory_bytes();
  return m;
}

status check_builtin_sections(const job_spec& spec) {
  std::vector<std::string> errors;
  const auto need = [&](bool present, const char* section) {
    if (!present) {
      errors.push_back(std::string(section) +
                       ": missing; the built-in trainer needs it (this job names worker.command, "
                       "which runs its own trainer)");
    }
  };
  need(spec.data.has_value(), "data");
  need(spec.model.has_value(), "model");
  need(spec.training.has_value(), "training");
  if (!errors.empty()) return make_error(join_lines(errors));
  return {};
}

namespace {

json data_json(const data_spec& d) {
  return std::visit(
      [](const auto& d) -> json {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, synthetic_data>) {
          return {{"type", "synthetic"},
                  {"samples", d.samples},
                  {"features", d.features},
                  {"seed", d.seed}};
        } else if constexpr (std::is_same_v<T, csv_data>) {
          json label = std::visit([](const auto& v) { return json(v); }, d.label_column);
          return {{"type", "csv"},
                  {"path", path_json(d.path)},
                  {"label_column", label},
                  {"header", d.header},
                  {"standardize", d.standardize}};
        } else {
          return {{"type", "npy"},
                  {"features", path_json(d.features)},
                  {"labels", path_json(d.labels)}};
        }
      },
      d);
}

json model_json(const model_spec& m) {
  json layers = json::array();
  for (const auto& l : m.layers) {
    layers.push_back({{"units", l.units}, {"activation", to_string(l.act)}});
  }
  return {{"layers", layers},
          {"initial_weights", m.initial_weights ? path_json(*m.initial_weights) : json(nullptr)}};
}

json training_json(const training_spec& t) {
  const auto& o = t.optimizer;
  json optimizer = {{"type", to_string(o.kind)}, {"learning_rate", o.learning_rate}};
  if (o.kind == optimizer_kind::adam) {
    optimizer["beta_1"] = o.beta_1;
    optimizer["beta_2"] = o.beta_2;
    optimizer["epsilon"] = o.epsilon;
  } else {
    optimizer["momentum"] = o.momentum;
    optimizer["nesterov"] = o.nesterov;
  }
  return {{"loss", to_string(t.loss)},  {"optimizer", optimizer},
          {"batch_size", t.batch_size}, {"epochs", t.epochs},
          {"shuffle", t.shuffle},       {"seed", t.seed},
          {"threads", t.threads},       {"validation_split", t.validation_split}};
}

}  // namespace

json to_json(const job_spec& s) {
  const auto optional = [](const auto& v) { return v ? json(*v) : json(nullptr); };

  json out = {
      {"name", s.name},
      {"shard", {{s.shard.unit == shard_unit::epochs ? "epochs" : "steps", s.shard.count}}},
      {"memory",
       {{"soft_limit_mib", optional(s.memory.soft_limit_mib)},
        {"hard_limit_mib", optional(s.memory.hard_limit_mib)},
        {"poll_ms", s.memory.poll_ms}}},
      {"restart",
       {{"max_failures", s.restart.max_failures},
        {"backoff_initial_ms", s.restart.backoff_initial_ms},
        {"backoff_max_ms", s.restart.backoff_max_ms},
        {"backoff_multiplier", s.restart.backoff_multiplier}}},
      {"checkpoints", {{"keep", s.checkpoints.keep}}},
      {"worker",
       {{"command", s.worker.command ? json(*s.worker.command) : json(nullptr)},
        {"working_dir",
         s.worker.working_dir.empty() ? json(nullptr) : path_json(s.worker.working_dir)},
        {"stall_timeout_ms", s.worker.stall_timeout_ms},
        {"stop_grace_ms", s.worker.stop_grace_ms},
        {"env", s.worker.env},
        {"preload", s.worker.preload},
        {"start_ahead", s.worker.start_ahead ? json(*s.worker.start_ahead) : json(nullptr)}}},
      {"debug",
       {{"leak_mib_per_step", s.debug.leak_mib_per_step},
        {"crash_at_step", optional(s.debug.crash_at_step)},
        {"hang_at_step", optional(s.debug.hang_at_step)}}},
  };
  // Absent sections stay absent: writing defaults would make a command worker's job look as if
  // it had chosen them.
  if (s.data) out["data"] = data_json(*s.data);
  if (s.model) out["model"] = model_json(*s.model);
  if (s.training) out["training"] = training_json(*s.training);
  if (!s.params.is_null()) out["params"] = s.params;
  return out;
}

job_geometry compute_geometry(const job_spec& spec, std::int64_t samples) {
  const training_spec training = spec.training.value_or(training_spec{});
  job_geometry g;
  samples = std::max<std::int64_t>(samples, 0);
  // keras.src.trainers.data_adapters.data_adapter_utils.train_validation_split:
  // split_at = int(math.floor(num_samples * (1.0 - validation_split))); validation is the tail.
  const auto split_at = static_cast<std::int64_t>(
      std::floor(static_cast<double>(samples) * (1.0 - training.validation_split)));
  g.train_samples = std::clamp<std::int64_t>(split_at, 0, samples);
  g.validation_samples = samples - g.train_samples;
  const std::int64_t batch = std::max<std::int64_t>(training.batch_size, 1);
  g.steps_per_epoch = g.train_samples / batch + (g.train_samples % batch != 0 ? 1 : 0);
  // Saturate instead of overflowing: a silly epoch count must not wrap to a small number.
  const auto mul = [](std::int64_t a, std::int64_t b) {
    if (a == 0 || b == 0) return std::int64_t{0};
    return a > int64_max / b ? int64_max : a * b;
  };
  g.total_steps = mul(training.epochs, g.steps_per_epoch);
  g.shard_steps = spec.shard.unit == shard_unit::epochs ? mul(spec.shard.count, g.steps_per_epoch)
                                                        : spec.shard.count;
  return g;
}

std::int64_t planned_total_steps(const job_spec& spec) {
  if (!spec.data || !spec.training) return 0;
  if (const auto* s = std::get_if<synthetic_data>(&*spec.data)) {
    return compute_geometry(spec, s->samples).total_steps;
  }
  return 0;
}

std::string_view to_string(activation a) { return activation_names[static_cast<std::size_t>(a)]; }
std::string_view to_string(loss_kind l) { return loss_names[static_cast<std::size_t>(l)]; }
std::string_view to_string(optimizer_kind o) {
  return optimizer_names[static_cast<std::size_t>(o)];
}

}  // namespace baton::protocol
