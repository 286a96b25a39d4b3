// Scripted workers for tests of the job runner, the daemon and `baton run` without a process:
// fake_launcher hands out fake workers whose stdout lines, exit and RSS the test (or a
// fake_trainer) decides, delivered through the io_context like a real worker's. Everything runs
// on the io_context's thread. The launcher owns every worker's state (fake_process), so a test
// can look at a worker after the runner has dropped it; the runner owns the worker_process
// handle, and dropping it kills a fake that still "runs".
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "os/env.h"
#include "protocol/checkpoint.h"
#include "protocol/checkpoint_store.h"
#include "protocol/job_spec.h"
#include "protocol/messages.h"
#include "supervisor/process_launcher.h"

namespace baton::test {

// One fake worker: what it says, whether it exited, what it was told.
class fake_process : public std::enable_shared_from_this<fake_process> {
 public:
  fake_process(boost::asio::io_context& io, std::int64_t pid, os::spawn_options options)
      : io_(io), pid_(pid), options_(std::move(options)), timer_(io) {}

  std::int64_t pid() const { return pid_; }
  const os::spawn_options& options() const { return options_; }
  // The value of a variable of its environment, empty if unset.
  std::string env(const std::string& name) const {
    for (const auto& [k, v] : options_.env) {
      if (k == name) return v;
    }
    return {};
  }

  // ----- what the worker does (queued in order, delivered on the io_context) -----
  void say(const protocol::worker_message& m) { say_line(protocol::encode(m)); }
  void say_line(std::string line) {
    if (ended_) return;
    push(std::move(line));
  }
  // Closes stdout and exits with `status`, once everything said before is delivered.
  void exit(os::exit_status status) {
    if (ended_) return;
    ended_ = true;
    timer_.cancel();
    push(eof{});
    push(status);
  }
  // Writes `bytes` to its stderr (through spawn_options::on_stderr, as the real one), in order
  // with what it says.
  void say_stderr(std::string bytes) {
    if (ended_) return;
    push(stderr_bytes{std::move(bytes)});
  }
  void set_rss(std::uint64_t bytes) { rss_ = bytes; }

  // ----- what happened to it -----
  bool exited() const { return ended_; }
  bool killed() const { return killed_; }
  const std::vector<std::string>& stdin_lines() const { return stdin_; }
  bool stop_received() const {
    for (const auto& l : stdin_) {
      if (l.find("\"stop\"") != std::string::npos) return true;
    }
    return false;
  }
  // Called on each line written to its stdin (the script's way to obey a stop).
  std::function<void(const std::string&)> on_stdin;
  int unpaced_requests = 0;  // worker_process::read_unpaced calls
  boost::asio::steady_timer& timer() { return timer_; }
  boost::asio::io_context& io() { return io_; }

  // ----- the worker_process side -----
  void set_line_handler(os::line_handler h) {
    on_line_ = std::move(h);
    pump();
  }
  void set_exit_handler(os::exit_handler h) {
    on_exit_ = std::move(h);
    pump();
  }
  void write(std::string line, os::write_handler done) {
    const bool gone = ended_;
    if (!gone) stdin_.push_back(line);
    boost::asio::post(io_, [self = shared_from_this(), line, done, gone] {
      if (done) {
        done(gone ? boost::system::error_code(boost::asio::error::broken_pipe)
                  : boost::system::error_code());
      }
      if (!gone && self->on_stdin) self->on_stdin(line);
    });
  }
  result<std::uint64_t> rss() const {
    if (ended_) return make_error("process " + std::to_string(pid_) + " is gone");
    return rss_;
  }
  void kill() {
    killed_ = true;
    exit(os::exit_status::signaled(9));
  }
  // The handle was dropped: nothing more reaches the runner.
  void detach() {
    on_line_ = nullptr;
    on_exit_ = nullptr;
    options_.on_stderr = nullptr;
    if (!ended_) kill();
  }

 private:
  struct eof {};  // of stdout and stderr both
  struct stderr_bytes {
    std::string bytes;
  };
  using happening = std::variant<std::string, eof, os::exit_status, stderr_bytes>;

  void push(happening h) {
    queue_.push_back(std::move(h));
    pump();
  }

  // Delivers the next happening whose handler is there, one per io_context turn.
  void pump() {
    if (pumping_ || queue_.empty()) return;
    const bool is_exit = std::holds_alternative<os::exit_status>(queue_.front());
    if (is_exit ? !on_exit_ : !on_line_) return;
    pumping_ = true;
    boost::asio::post(io_, [self = shared_from_this()] {
      self->pumping_ = false;
      if (self->queue_.empty()) return;
      auto h = std::move(self->queue_.front());
      self->queue_.pop_front();
      if (auto* line = std::get_if<std::string>(&h)) {
        if (self->on_line_) self->on_line_({}, *line);
      } else if (auto* err = std::get_if<stderr_bytes>(&h)) {
        if (self->options_.on_stderr) self->options_.on_stderr({}, err->bytes);
      } else if (std::holds_alternative<eof>(h)) {
        if (self->options_.on_stderr) self->options_.on_stderr(boost::asio::error::eof, {});
        if (self->on_line_) self->on_line_(boost::asio::error::eof, {});
      } else if (self->on_exit_) {
        auto done = std::move(self->on_exit_);
        done({}, std::get<os::exit_status>(h));
      }
      self->pump();
    });
  }

  boost::asio::io_context& io_;
  std::int64_t pid_;
  os::spawn_options options_;
  boost::asio::steady_timer timer_;
  std::deque<happening> queue_;
  bool pumping_ = false;
  bool ended_ = false;
  bool killed_ = false;
  std::uint64_t rss_ = 10 << 20;
  std::vector<std::string> stdin_;
  os::line_handler on_line_;
  os::exit_handler on_exit_;
};

class fake_worker_handle final : public supervisor::worker_process {
 public:
  explicit fake_worker_handle(std::shared_ptr<fake_process> p) : p_(std::move(p)) {}
  ~fake_worker_handle() override { p_->detach(); }
  std::int64_t pid() const override { return p_->pid(); }
  void async_read_lines(os::line_handler on_line) override {
    p_->set_line_handler(std::move(on_line));
  }
  void async_write_line(std::string line, os::write_handler on_done) override {
    p_->write(std::move(line), std::move(on_done));
  }
  void async_wait(os::exit_handler on_exit) override { p_->set_exit_handler(std::move(on_exit)); }
  // A fake's lines are never paced: counted, so tests see that the runner asked.
  void read_unpaced() override { ++p_->unpaced_requests; }
  result<std::uint64_t> rss_bytes() const override { return p_->rss(); }
  status kill_tree() override {
    if (!p_->exited()) p_->kill();
    return {};
  }

 private:
  std::shared_ptr<fake_process> p_;
};

class fake_launcher final : public supervisor::process_launcher {
 public:
  // Runs for every worker started (after spawn returns, on the io_context): the worker's script.
  std::function<void(fake_process&)> script;
  // The next spawns fail with this message while set.
  std::optional<std::string> fail_spawns;

  result<std::unique_ptr<supervisor::worker_process>> spawn(
      boost::asio::io_context& io, const os::spawn_options& options) override {
    if (fail_spawns) return make_error(*fail_spawns);
    auto p = std::make_shared<fake_process>(io, next_pid_++, options);
    workers.push_back(p);
    boost::asio::post(io, [p, s = script] {
      if (s) s(*p);
    });
    return std::unique_ptr<supervisor::worker_process>(new fake_worker_handle(p));
  }

  std::vector<std::shared_ptr<fake_process>> workers;  // every worker started, oldest first

 private:
  std::int64_t next_pid_ = 1000;
};

// A well-behaved trainer for jobs with synthetic data: reads its job (BATON_JOB_FILE, through
// `files`) for the total and shard steps, resumes at BATON_START_STEP, runs one step per
// `step_time`, reports progress, and at the end of its shard (or of the job, or when told to stop)
// writes a real checkpoint through `files` into BATON_CHECKPOINT_DIR, announces it, says done and
// exits (3 after a stop, else 0). `hang_after` > 0: it stops stepping after that many steps of a
// shard and only a stop (or a kill) ends it.
struct fake_trainer {
  os::env* files = nullptr;
  std::chrono::milliseconds step_time{3};
  std::int64_t hang_after = 0;
  // Filled from the job file when the worker starts.
  std::int64_t total_steps = 0;
  std::int64_t shard_steps = 0;

  std::function<void(fake_process&)> script() const {
    return [cfg = *this](fake_process& p) mutable {
      auto spec = protocol::load_job_spec(*cfg.files, p.env("BATON_JOB_FILE"));
      if (!spec || !spec->data) {
        p.exit(os::exit_status::exited(2));
        return;
      }
      const auto& data = std::get<protocol::synthetic_data>(*spec->data);
      const auto g = protocol::compute_geometry(*spec, data.samples);
      cfg.total_steps = g.total_steps;
      cfg.shard_steps = g.shard_steps;
      cfg.run(p);
    };
  }

  void run(fake_process& p) const {
    const std::int64_t start = std::stoll(p.env("BATON_START_STEP"));
    auto state = std::make_shared<std::int64_t>(start);
    auto stopping = std::make_shared<bool>(false);
    p.say(protocol::hello_msg{protocol::protocol_version, p.pid(), "fake-trainer"});
    p.on_stdin = [stopping](const std::string& line) {
      if (line.find("\"stop\"") != std::string::npos) *stopping = true;
    };
    auto self = p.shared_from_this();
    // The pending timer handler holds the loop; the loop itself only a weak reference to it.
    auto tick = std::make_shared<std::function<void()>>();
    const auto cfg = *this;
    *tick = [cfg, self, state, stopping, start, weak = std::weak_ptr(tick)] {
      if (self->exited()) return;
      auto& step = *state;
      const bool shard_end = step - start >= cfg.shard_steps || step >= cfg.total_steps;
      if (*stopping || shard_end) {
        if (step > start) cfg.checkpoint(*self, step);
        self->say(protocol::done_msg{step, step >= cfg.total_steps});
        self->exit(os::exit_status::exited(*stopping && step < cfg.total_steps ? 3 : 0));
        return;
      }
      if (cfg.hang_after == 0 || step - start < cfg.hang_after) {
        ++step;
        protocol::progress_msg m;
        m.step = step;
        m.total_steps = cfg.total_steps;
        m.loss = 1.0 / static_cast<double>(step);
        self->say(m);
      }
      self->timer().expires_after(cfg.step_time);
      self->timer().async_wait([t = weak.lock()](const boost::system::error_code& ec) {
        if (!ec && t) (*t)();
      });
    };
    (*tick)();
  }

  void checkpoint(fake_process& p, std::int64_t step) const {
    protocol::checkpoint c;
    c.metadata[protocol::meta::step] = std::to_string(step);
    c.metadata[protocol::meta::job] = p.env("BATON_JOB_ID");
    protocol::tensor t;
    t.name = "w";
    t.type = protocol::dtype::f32;
    t.shape = {1};
    t.bytes.assign(4, '\0');
    c.tensors.push_back(t);
    protocol::checkpoint_store store(*files, p.env("BATON_CHECKPOINT_DIR"), 2);
    auto saved = store.save(c);
    if (!saved) return;
    p.say(protocol::checkpoint_msg{saved->path.string(), step, saved->digest});
  }
};

}  // namespace baton::test
