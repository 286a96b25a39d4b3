#include "supervisor/process_launcher.h"

#include <string_view>

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
    std::string job_dir;
    for (const auto& [name, value] : options.env) {
      if (name == "BATON_JOB_DIR") job_dir = value;
    }
    return std::unique_ptr<worker_process>(new os_worker(std::move(*p), std::move(job_dir)));
  }
};

}  // namespace

process_launcher& os_process_launcher() {
  static auto* launcher = new os_launcher();  // never destroyed: workers may outlive statics
  return *launcher;
}

}  // namespace baton::supervisor
