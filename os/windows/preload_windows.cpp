// Windows has no fork: worker.preload is refused here (the job spec check says so at submit on
// Windows too; this is the backstop).
#include "os/preload_server.h"

namespace baton::os {

struct preload_server::impl {};

preload_server::preload_server(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
preload_server::~preload_server() = default;
std::int64_t preload_server::pid() const { return 0; }
bool preload_server::usable() const { return false; }

result<std::unique_ptr<preload_server>> preload_server::start(boost::asio::io_context&,
                                                              const spawn_options&,
                                                              const std::vector<std::string>&) {
  return make_error("worker.preload is not supported on Windows (it forks the shards)");
}

void preload_server::async_wait_ready(std::chrono::milliseconds, std::function<void(status)>) {}

result<std::unique_ptr<process>> preload_server::fork_worker(boost::asio::io_context&,
                                                             const spawn_options&,
                                                             std::chrono::milliseconds) {
  return make_error("worker.preload is not supported on Windows");
}

}  // namespace baton::os
