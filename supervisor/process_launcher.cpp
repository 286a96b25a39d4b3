#include "supervisor/process_launcher.h"

#include <string_view>

#include "os/preload_server.h"
#include "os/system.h"

namespace baton::supervisor {

namespace {

class os_worker final : public worker_process {
 public:
  os_worker(std::unique_ptr<os::process> p, std::string job_dir)
      : p_(std::move(p)), job_dir_(std::move(job_dir)) {}

  std::int64_t pid() const override { return p_->pid(); }
  void async_read_lines(os::line_handler on_line) override {
    p_->async_read_lines(std::move(on_line));
  }
  void async_write_line(std::string line, os::write_handler on_done) override {
    p_->async_write_line(std::move(line), std::move(on_done));
  }
  void async_wait(os::exit_handler on_exit) override { p_->async_wait(std::move(on_exit)); }
  void read_unpaced() override { p_->read_unpaced(); }
  result<std::uint64_t> rss_bytes() const override { return p_->rss_bytes(); }

  status kill_tree() override {
    auto s = p_->signal_group(os::group_signal::kill);
    // A cgroup (or Job Object) held everything the worker started, and its kill took it all.
    if (p_->contained()) return s;
    // Descendants that left the group (setsid, double fork) are found through the tree.
    (void)os::kill_descendants(p_->pid());
    // A double fork leaves no trace in the tree: the escapee was re-parented to us (subreaper)
    // before any kill. It still carries this job's environment.
    if (!job_dir_.empty()) (void)os::kill_orphans_with_env("BATON_JOB_DIR", job_dir_);
    return s;
  }

 private:
  std::unique_ptr<os::process> p_;
  std::string job_dir_;
};

std::string job_dir_of(const os::spawn_options& options) {
  std::string job_dir;
  for (const auto& [name, value] : options.env) {
    if (name == "BATON_JOB_DIR") job_dir = value;
  }
  return job_dir;
}

class os_preload_parent final : public preload_parent {
 public:
  explicit os_preload_parent(std::unique_ptr<os::preload_server> s) : s_(std::move(s)) {}
  std::int64_t pid() const override { return s_->pid(); }
  void async_wait_ready(std::chrono::milliseconds timeout,
                        std::function<void(status)> on_ready) override {
    s_->async_wait_ready(timeout, std::move(on_ready));
  }
  result<std::unique_ptr<worker_process>> fork(boost::asio::io_context& io,
                                               const os::spawn_options& options,
                                               std::chrono::milliseconds timeout) override {
    auto p = s_->fork_worker(io, options, timeout);
    if (!p) return p.error();
    return std::unique_ptr<worker_process>(new os_worker(std::move(*p), job_dir_of(options)));
  }
  bool usable() const override { return s_->usable(); }

 private:
  std::unique_ptr<os::preload_server> s_;
};

class os_launcher final : public process_launcher {
 public:
  result<std::unique_ptr<worker_process>> spawn(boost::asio::io_context& io,
                                                const os::spawn_options& options) override {
    // Escapees killed after earlier workers were re-parented to us (subreaper); collect their
    // exit status so a long-running supervisor does not accumulate zombies. Never touches a
    // process that os::spawn started: those belong to their `process` objects.
    (void)os::reap_orphans();
    auto p = os::spawn(io, options);
    if (!p) return p.error();
    return std::unique_ptr<worker_process>(new os_worker(std::move(*p), job_dir_of(options)));
  }

  result<std::unique_ptr<preload_parent>> start_preload(
      boost::asio::io_context& io, const os::spawn_options& options,
      const std::vector<std::string>& modules) override {
    auto s = os::preload_server::start(io, options, modules);
    if (!s) return s.error();
    return std::unique_ptr<preload_parent>(new os_preload_parent(std::move(*s)));
  }
};

}  // namespace

result<std::unique_ptr<preload_parent>> process_launcher::start_preload(
    boost::asio::io_context&, const os::spawn_options&, const std::vector<std::string>&) {
  return make_error("worker.preload: this launcher has no fork server");
}

process_launcher& os_process_launcher() {
  static auto* launcher = new os_launcher();  // never destroyed: workers may outlive statics
  return *launcher;
}

os::containment_report set_up_containment(const std::filesystem::path& state_dir,
                                          std::string& warning) {
  os::containment_options co;
  co.key = std::filesystem::absolute(state_dir).lexically_normal().string();
  const auto forced = os::get_env("BATON_CONTAINMENT");
  co.force_process_group = forced && *forced == "process-group";
  if (forced && !forced->empty() && *forced != "process-group" && *forced != "auto") {
    warning = "BATON_CONTAINMENT=" + *forced + ": expected auto or process-group; using auto";
  }
  return os::setup_containment(co);
}

}  // namespace baton::supervisor
