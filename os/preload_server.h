// A fork server for Python workers (worker.preload): one long-lived parent per job that imported
// the trainer's modules once and forks every shard from itself, so a shard starts in
// milliseconds instead of paying `import torch` again, while the leak still dies with the shard
// (each shard is a fresh process; only the imports are shared, copy-on-write).
// The parent is python/baton/preload.py (`python -m baton.preload --import M ... --fd N`); the
// messages it and the supervisor exchange over its socket are in protocol/README.md ("Fork
// server").
// Containment: the parent runs in a cgroup of its own beside the job's (group "<job>/preload"),
// so the kill at each shard's end never reaches it and its imports are never charged to the
// job's memory budget. Each shard, a grandchild of the parent re-parented to the supervisor (a
// subreaper), is checked (our child, in the parent's cgroup), moved into the job's cgroup and
// only then let go: not one line of the trainer runs uncontained. So it needs cgroup containment
// and the subreaper; start() says why not otherwise, and on Windows (no fork).
// The supervisor owns each preload_server; destroying one closes the socket (the parent exits at
// end of file) and kills whatever is left in the parent's cgroup. Shards it forked are not its:
// each is a `process` of its own, as a spawned worker is. Not thread-safe: one caller at a time.
// Implementations: os/posix/preload_posix.cpp, os/windows/preload_windows.cpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "os/process.h"

namespace baton::os {

class preload_server {
 public:
  struct impl;

  // Starts the parent: `options` as for spawn (argv is the interpreter only, e.g. ["python3"];
  // env, working_dir, on_stderr, credentials, group = the job's group), running
  // `argv[0] -m baton.preload --import M...` for each of `modules`. Returns at once: the parent
  // is importing; wait_ready() waits for it.
  static result<std::unique_ptr<preload_server>> start(boost::asio::io_context& io,
                                                       const spawn_options& options,
                                                       const std::vector<std::string>& modules);
  ~preload_server();
  preload_server(const preload_server&) = delete;
  preload_server& operator=(const preload_server&) = delete;

  std::int64_t pid() const;

  // Calls `on_ready` once, on the io thread, with the parent's first message: ok once it has
  // imported its modules; otherwise an error with its reason (an import failed, or started
  // threads, which makes forking unsafe), or that it exited or did not answer within `timeout`.
  // Imports take seconds, so this waits without blocking. Not called once the server is
  // destroyed. Call once, before the first fork_worker. Must not throw.
  void async_wait_ready(std::chrono::milliseconds timeout, std::function<void(status)> on_ready);

  // Forks one shard and returns it as spawn would, contained in options.group's cgroup:
  // options.argv is [python, script, args...] (the parent's interpreter runs `script` as
  // __main__ with sys.argv = argv[1:]), with env, working_dir, on_stderr and read_pace as for
  // spawn; credentials are the parent's (it already runs as the job's user). Blocks up to
  // `timeout` for the parent's answer, a fork of an idle process: milliseconds. After any
  // failure the server is broken (a late answer would be taken for the next one's) and every
  // later call fails: start another.
  result<std::unique_ptr<process>> fork_worker(boost::asio::io_context& io,
                                               const spawn_options& options,
                                               std::chrono::milliseconds timeout);

  // False once the parent has exited or the server is broken.
  bool usable() const;

 private:
  explicit preload_server(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;  // shared with the pending wait's handlers
};

}  // namespace baton::os
