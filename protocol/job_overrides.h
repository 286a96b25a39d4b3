// Overrides of a job document's fields from the command line (`--set
// training.optimizer.learning_rate=0.01`, repeatable, on `baton run` and `baton submit`), applied
// to the document before it is validated, so an override is checked exactly like the field it
// replaces and its errors name the same JSON path. Pure: no file access but through the env.
//
// A value is typed by the spec: where the field (as written, or as the spec fills it in by
// default) is a string, the value is taken verbatim (`name=123` is the name "123"); where it is a
// number, a boolean, null, an array or an object, the value must be JSON of that kind
// (`training.batch_size=64`, `worker.command=["python3","train.py"]`); a field the document does
// not have takes JSON where the value parses as JSON, else the string. Path segments are object
// keys, or array indexes for arrays (`model.layers.0.units=128`); missing objects on the way are
// created.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "os/env.h"
#include "protocol/job_spec.h"

namespace baton::protocol {

struct job_override {
  std::vector<std::string> path;  // "training.batch_size" -> {"training", "batch_size"}
  std::string value;              // as typed, before typing
  std::string text;               // the whole argument, for messages
};

// "a.b.c=value". Errors name the argument: "--set 'x': expected PATH=VALUE".
result<job_override> parse_override(std::string_view arg);

// Applies the overrides in order to `doc` (a JSON object). Errors name the override:
// "--set training.batch_size=abc: training.batch_size is a number; 'abc' is not one".
result<nlohmann::json> apply_overrides(nlohmann::json doc, const std::vector<job_override>& sets);

// load_job_spec with overrides: reads the file, applies them, then parses and validates as
// load_job_spec does (errors prefixed with the file name).
result<job_spec> load_job_spec(os::env& e, const std::filesystem::path& file,
                               const std::vector<job_override>& sets);

}  // namespace baton::protocol
