// The process handle's methods, the same on every OS: each forwards to the OS's process::impl
// (os/posix/process_posix.cpp, os/windows/process_windows.cpp).
#include "os/process.h"

namespace baton::os {

process::process(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
process::~process() {
  if (impl_) impl_->abandon();
}
std::int64_t process::pid() const { return impl_->pid(); }
void process::async_read_lines(line_handler on_line) { impl_->start_reading(std::move(on_line)); }
void process::async_write_line(std::string line, write_handler on_done) {
  impl_->write_line(std::move(line), std::move(on_done));
}
void process::close_stdin() { impl_->close_stdin(); }
void process::read_unpaced() { impl_->read_unpaced(); }
void process::async_wait(exit_handler on_exit) { impl_->wait(std::move(on_exit)); }
bool process::exited() const { return impl_->exited(); }
status process::signal_group(group_signal sig) { return impl_->signal_group(sig); }
result<std::uint64_t> process::rss_bytes() const { return impl_->rss_bytes(); }
bool process::contained() const { return impl_->contained(); }

}  // namespace baton::os
