// No Service Control Manager here: systemd runs baton through deploy/systemd/baton.service and
// hears from it over os/service_notify.h, so each call says so rather than pretending.
#include "os/service_host.h"

namespace baton::os {

namespace {
error unsupported(const std::string& what) {
  return make_error(what +
                    " needs the Windows Service Control Manager, which this platform does not "
                    "have; under systemd use deploy/systemd/baton.service (see deploy/README.md)");
}
}  // namespace

bool service_manager_supported() { return false; }

result<int> run_as_service(std::function<int(service_session&)>) {
  return unsupported("running as a Windows service");
}

status install_service(const service_install_options&,
                       const std::function<void(const std::string&)>&) {
  return unsupported("installing a Windows service");
}

status reload_service(const std::string&) { return unsupported("reloading a Windows service"); }

status uninstall_service(const std::string&, std::chrono::seconds,
                         const std::function<void(const std::string&)>&) {
  return unsupported("removing a Windows service");
}

}  // namespace baton::os
