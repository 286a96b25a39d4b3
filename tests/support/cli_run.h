// `baton` run in-process: run_cli() with an argv built from strings, its exit code and both
// streams captured. For CLI tests that need no child process (those use support/run_process.h).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "supervisor/cli.h"

namespace baton::test {

struct cli_run {
  int code;
  std::string out;
  std::string err;
};

// `baton <args...>`: argv[0] is added here.
inline cli_run baton_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "baton");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  const int code = supervisor::run_cli(static_cast<int>(args.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace baton::test
