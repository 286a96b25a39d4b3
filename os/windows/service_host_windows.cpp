// The Windows service host. StartServiceCtrlDispatcherW blocks the main thread and runs
// service_main on a thread of its own; the SCM calls on_control on the dispatcher (main)
// thread. So: the body runs on the service thread, control requests reach the body's handler
// from the main thread, and status reports come from both; one mutex keeps the status model and
// the SetServiceStatus calls in order, another guards the handler. One service per process, so
// the state is a process-wide singleton.
#include "os/windows/win_util.h"
// After <windows.h> (from win_util.h), which WIN32_LEAN_AND_MEAN keeps from including it.
#include <winsvc.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "os/service_host.h"
#include "os/windows/service_host_windows.h"

namespace baton::os {

static_assert(scm::control_stop == SERVICE_CONTROL_STOP);
static_assert(scm::control_pause == SERVICE_CONTROL_PAUSE);
static_assert(scm::control_continue == SERVICE_CONTROL_CONTINUE);
static_assert(scm::control_interrogate == SERVICE_CONTROL_INTERROGATE);
static_assert(scm::control_shutdown == SERVICE_CONTROL_SHUTDOWN);
static_assert(scm::control_paramchange == SERVICE_CONTROL_PARAMCHANGE);
static_assert(scm::control_preshutdown == SERVICE_CONTROL_PRESHUTDOWN);
static_assert(scm::state_stopped == SERVICE_STOPPED);
static_assert(scm::state_start_pending == SERVICE_START_PENDING);
static_assert(scm::state_stop_pending == SERVICE_STOP_PENDING);
static_assert(scm::state_running == SERVICE_RUNNING);
static_assert(scm::accept_stop == SERVICE_ACCEPT_STOP);
static_assert(scm::accept_shutdown == SERVICE_ACCEPT_SHUTDOWN);
static_assert(scm::accept_paramchange == SERVICE_ACCEPT_PARAMCHANGE);
static_assert(scm::accept_preshutdown == SERVICE_ACCEPT_PRESHUTDOWN);
static_assert(scm::no_error == NO_ERROR);
static_assert(scm::error_call_not_implemented == ERROR_CALL_NOT_IMPLEMENTED);
static_assert(scm::error_service_specific == ERROR_SERVICE_SPECIFIC_ERROR);

namespace {

struct host_state {
  std::mutex status_mutex;  // model and handle; held across SetServiceStatus so reports keep order
  SERVICE_STATUS_HANDLE handle = nullptr;
  service_status_model model;

  std::mutex handler_mutex;  // handler and pending; held while the handler runs
  std::function<void(service_action)> handler;
  std::vector<service_action> pending;

  std::atomic<bool> hosted{false};
  // Written on the service thread before it reports SERVICE_STOPPED, read on the main thread
  // after StartServiceCtrlDispatcherW returns, which happens only after that report.
  std::function<int(service_session&)> body;
  std::wstring name;
  std::string failure;
  bool body_ran = false;
  int exit_code = 0;
};

host_state& host() {
  static host_state h;
  return h;
}

status report(host_state& h, const service_status_report& r) {
  if (h.handle == nullptr) return {};
  SERVICE_STATUS s{};
  s.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
  s.dwCurrentState = r.state;
  s.dwControlsAccepted = r.controls_accepted;
  s.dwWin32ExitCode = r.win32_exit_code;
  s.dwServiceSpecificExitCode = r.service_exit_code;
  s.dwCheckPoint = r.checkpoint;
  s.dwWaitHint = r.wait_hint_ms;
  if (!::SetServiceStatus(h.handle, &s)) return win::os_error("SetServiceStatus");
  return {};
}

class session final : public service_session {
 public:
  std::string name() const override { return win::narrow(host().name); }

  void set_handler(std::function<void(service_action)> handler) override {
    auto& h = host();
    std::lock_guard lock(h.handler_mutex);
    h.handler = std::move(handler);
    if (!h.handler) return;
    for (const auto a : h.pending) h.handler(a);
    h.pending.clear();
  }
};

DWORD WINAPI on_control(DWORD control, DWORD, LPVOID, LPVOID) {
  auto& h = host();
  const auto action = action_for_control(control);
  switch (action) {
    case service_action::not_implemented:
      return ERROR_CALL_NOT_IMPLEMENTED;
    case service_action::report_status: {
      std::lock_guard lock(h.status_mutex);
      (void)report(h, h.model.current());  // nobody to tell: the SCM keeps the last report
      return NO_ERROR;
    }
    case service_action::drain: {
      // At once, so the SCM (and `sc stop`) sees the request taken even while the body's loop
      // is busy; the body's own notify_stopping() follows and advances the checkpoint.
      std::lock_guard lock(h.status_mutex);
      (void)report(h, h.model.stopping());
      break;
    }
    case service_action::reload:
      break;
  }
  std::lock_guard lock(h.handler_mutex);
  if (h.handler) {
    h.handler(action);
  } else {
    h.pending.push_back(action);
  }
  return NO_ERROR;
}

void WINAPI service_main(DWORD argc, LPWSTR* argv) {
  auto& h = host();
  h.name = argc > 0 && argv[0] != nullptr ? std::wstring(argv[0]) : std::wstring();
  h.handle = ::RegisterServiceCtrlHandlerExW(h.name.c_str(), on_control, nullptr);
  if (h.handle == nullptr) {
    // Without a handle there is no way to report anything; the SCM times the start out.
    h.failure = win::os_error("RegisterServiceCtrlHandlerExW").message;
    return;
  }
  {
    std::lock_guard lock(h.status_mutex);
    (void)report(h, h.model.starting());
  }
  h.hosted = true;
  session s;
  int code = 1;
  try {
    code = h.body(s);
  } catch (const std::exception& e) {
    h.failure = std::string("the service failed: ") + e.what();
  } catch (...) {
    h.failure = "the service failed with an unknown exception";
  }
  s.set_handler({});
  h.hosted = false;
  h.exit_code = code;
  h.body_ran = true;
  std::lock_guard lock(h.status_mutex);
  (void)report(h, h.model.stopped(code));
}

// SC_HANDLE owner.
class sc_handle {
 public:
  explicit sc_handle(SC_HANDLE h) : h_(h) {}
  sc_handle(const sc_handle&) = delete;
  sc_handle& operator=(const sc_handle&) = delete;
  ~sc_handle() {
    if (h_ != nullptr) ::CloseServiceHandle(h_);
  }
  SC_HANDLE get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  SC_HANDLE h_;
};

result<sc_handle*> open_manager(DWORD access, std::unique_ptr<sc_handle>& out) {
  out = std::make_unique<sc_handle>(::OpenSCManagerW(nullptr, nullptr, access));
  if (*out) return out.get();
  const DWORD e = ::GetLastError();
  if (e == ERROR_ACCESS_DENIED) {
    return make_error("cannot open the Service Control Manager: " + win::error_text(e) +
                      "; run from an elevated (Administrator) prompt");
  }
  return win::os_error("cannot open the Service Control Manager", e);
}

result<service_status_report> query(SC_HANDLE svc) {
  SERVICE_STATUS_PROCESS s{};
  DWORD needed = 0;
  if (!::QueryServiceStatusEx(svc, SC_STATUS_PROCESS_INFO, reinterpret_cast<BYTE*>(&s), sizeof s,
                              &needed)) {
    return win::os_error("QueryServiceStatusEx");
  }
  service_status_report r;
  r.state = s.dwCurrentState;
  r.controls_accepted = s.dwControlsAccepted;
  r.win32_exit_code = s.dwWin32ExitCode;
  r.service_exit_code = s.dwServiceSpecificExitCode;
  r.checkpoint = s.dwCheckPoint;
  r.wait_hint_ms = s.dwWaitHint;
  return r;
}

const char* state_name(std::uint32_t state) {
  switch (state) {
    case SERVICE_STOPPED:
      return "STOPPED";
    case SERVICE_START_PENDING:
      return "START_PENDING";
    case SERVICE_STOP_PENDING:
      return "STOP_PENDING";
    case SERVICE_RUNNING:
      return "RUNNING";
    case SERVICE_CONTINUE_PENDING:
      return "CONTINUE_PENDING";
    case SERVICE_PAUSE_PENDING:
      return "PAUSE_PENDING";
    case SERVICE_PAUSED:
      return "PAUSED";
    default:
      return "an unknown state";
  }
}

}  // namespace

namespace win {

bool service_hosted() { return host().hosted.load(); }

status service_report_ready() {
  auto& h = host();
  if (!h.hosted) return {};
  std::lock_guard lock(h.status_mutex);
  return report(h, h.model.ready());
}

status service_report_stopping() {
  auto& h = host();
  if (!h.hosted) return {};
  std::lock_guard lock(h.status_mutex);
  return report(h, h.model.stopping());
}

status service_report_extend(std::chrono::milliseconds more) {
  auto& h = host();
  if (!h.hosted) return {};
  std::lock_guard lock(h.status_mutex);
  return report(h, h.model.extend(more));
}

}  // namespace win

bool service_manager_supported() { return true; }

result<int> run_as_service(std::function<int(service_session&)> body) {
  auto& h = host();
  h.body = std::move(body);
  // Ignored for a SERVICE_WIN32_OWN_PROCESS service (which baton installs), but never null.
  wchar_t any_name[] = L"baton";
  SERVICE_TABLE_ENTRYW table[] = {{any_name, service_main}, {nullptr, nullptr}};
  if (!::StartServiceCtrlDispatcherW(table)) {
    const DWORD e = ::GetLastError();
    if (e == ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
      return make_error(
          "not started by the Windows Service Control Manager (error 1063): `baton serve "
          "--service` runs only as an installed service (baton service install, then sc start "
          "NAME or Start-Service NAME); in a console run `baton serve` without --service");
    }
    return win::os_error("StartServiceCtrlDispatcherW", e);
  }
  if (!h.failure.empty()) return make_error(h.failure);
  if (!h.body_ran) return make_error("the Service Control Manager never started the service");
  return h.exit_code;
}

status install_service(const service_install_options& o,
                       const std::function<void(const std::string&)>& warn) {
  std::unique_ptr<sc_handle> manager;
  auto m = open_manager(SC_MANAGER_CONNECT | SC_MANAGER_CREATE_SERVICE, manager);
  if (!m) return m.error();
  const auto name = win::widen(o.name);
  const auto display = win::widen(o.display_name.empty() ? o.name : o.display_name);
  const auto command = win::widen(o.command_line);
  sc_handle svc(::CreateServiceW(manager->get(), name.c_str(), display.c_str(), SERVICE_ALL_ACCESS,
                                 SERVICE_WIN32_OWN_PROCESS, SERVICE_AUTO_START,
                                 SERVICE_ERROR_NORMAL, command.c_str(), nullptr, nullptr, nullptr,
                                 nullptr /* LocalSystem */, nullptr));
  if (!svc) {
    const DWORD e = ::GetLastError();
    if (e == ERROR_SERVICE_EXISTS) {
      return make_error("a service named " + o.name +
                        " exists already (`baton service uninstall --name " + o.name +
                        "` removes it): " + win::error_text(e));
    }
    if (e == ERROR_DUPLICATE_SERVICE_NAME) {
      return make_error("another service already uses the name or display name \"" +
                        win::narrow(display) +
                        "\" (choose another --display-name): " + win::error_text(e));
    }
    return win::os_error("cannot create service " + o.name, e);
  }
  // A half-configured service (no recovery actions) would look installed and fail silently
  // later: the parts that matter remove it again.
  const auto roll_back = [&](const std::string& what) -> status {
    const DWORD e = ::GetLastError();
    ::DeleteService(svc.get());
    return win::os_error("service " + o.name + " not installed: " + what, e);
  };

  auto description = win::widen(o.description);
  SERVICE_DESCRIPTIONW d{description.data()};
  if (!::ChangeServiceConfig2W(svc.get(), SERVICE_CONFIG_DESCRIPTION, &d)) {
    return roll_back("cannot set its description");
  }

  std::vector<SC_ACTION> actions;
  for (const auto delay : o.restart_delays) {
    actions.push_back({SC_ACTION_RESTART, static_cast<DWORD>(delay.count())});
  }
  SERVICE_FAILURE_ACTIONSW failure{};
  failure.dwResetPeriod = static_cast<DWORD>(o.reset_period.count());
  failure.cActions = static_cast<DWORD>(actions.size());
  failure.lpsaActions = actions.data();
  if (!::ChangeServiceConfig2W(svc.get(), SERVICE_CONFIG_FAILURE_ACTIONS, &failure)) {
    return roll_back("cannot set its recovery actions");
  }

  // Without the flag only a crash counts as a failure, not a stop with a non-zero exit code.
  // Older SCMs (and wine) lack it; the service still restarts after a crash then.
  SERVICE_FAILURE_ACTIONS_FLAG flag{TRUE};
  if (!::ChangeServiceConfig2W(svc.get(), SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, &flag)) {
    warn("service " + o.name + ": recovery actions apply to crashes only, not to failed stops: " +
         win::error_text(::GetLastError()));
  }
  SERVICE_PRESHUTDOWN_INFO pre{static_cast<DWORD>(o.preshutdown_timeout.count())};
  if (!::ChangeServiceConfig2W(svc.get(), SERVICE_CONFIG_PRESHUTDOWN_INFO, &pre)) {
    warn("service " + o.name +
         ": keeps the default preshutdown timeout: " + win::error_text(::GetLastError()));
  }
  return {};
}

status reload_service(const std::string& name) {
  std::unique_ptr<sc_handle> manager;
  auto m = open_manager(SC_MANAGER_CONNECT, manager);
  if (!m) return m.error();
  const auto wname = win::widen(name);
  // PARAMCHANGE is one of the controls SERVICE_PAUSE_CONTINUE grants.
  sc_handle svc(::OpenServiceW(manager->get(), wname.c_str(), SERVICE_PAUSE_CONTINUE));
  if (!svc) {
    const DWORD e = ::GetLastError();
    if (e == ERROR_SERVICE_DOES_NOT_EXIST) {
      return make_error("no service named " + name + " is installed: " + win::error_text(e));
    }
    return win::os_error("cannot open service " + name, e);
  }
  SERVICE_STATUS ignored{};
  if (!::ControlService(svc.get(), SERVICE_CONTROL_PARAMCHANGE, &ignored)) {
    const DWORD e = ::GetLastError();
    if (e == ERROR_SERVICE_NOT_ACTIVE) {
      return make_error("service " + name + " is not running: " + win::error_text(e));
    }
    return win::os_error("cannot ask service " + name + " to reload", e);
  }
  return {};
}

status uninstall_service(const std::string& name, std::chrono::seconds timeout,
                         const std::function<void(const std::string&)>& progress) {
  std::unique_ptr<sc_handle> manager;
  auto m = open_manager(SC_MANAGER_CONNECT, manager);
  if (!m) return m.error();
  const auto wname = win::widen(name);
  sc_handle svc(
      ::OpenServiceW(manager->get(), wname.c_str(), SERVICE_STOP | SERVICE_QUERY_STATUS | DELETE));
  if (!svc) {
    const DWORD e = ::GetLastError();
    if (e == ERROR_SERVICE_DOES_NOT_EXIST) {
      return make_error("no service named " + name + " is installed: " + win::error_text(e));
    }
    return win::os_error("cannot open service " + name, e);
  }

  using clock = stop_wait::clock;
  const auto deadline = clock::now() + timeout;
  stop_wait wait;
  bool stop_sent = false;
  for (;;) {
    auto s = query(svc.get());
    if (!s) return with_context("service " + name, s.error());
    if (s->state == SERVICE_STOPPED) break;
    if (!stop_sent && s->state != SERVICE_START_PENDING) {
      SERVICE_STATUS ignored{};
      if (!::ControlService(svc.get(), SERVICE_CONTROL_STOP, &ignored)) {
        const DWORD e = ::GetLastError();
        // Not active: it stopped between the query and now; cannot accept: already stopping.
        if (e != ERROR_SERVICE_NOT_ACTIVE && e != ERROR_SERVICE_CANNOT_ACCEPT_CTRL) {
          return win::os_error("cannot stop service " + name, e);
        }
      }
      stop_sent = true;
      progress("stopping service " + name + " (running jobs checkpoint first)");
      continue;
    }
    const auto now = clock::now();
    if (wait.observe(*s, now) == stop_wait::verdict::hung) {
      return make_error("service " + name + " stopped making progress (" + state_name(s->state) +
                        ", checkpoint " + std::to_string(s->checkpoint) + ", wait hint " +
                        std::to_string(s->wait_hint_ms) +
                        " ms); not removed: its workers may still run");
    }
    if (now > deadline) {
      return make_error("service " + name + " still " + state_name(s->state) + " after " +
                        std::to_string(timeout.count()) + " s; not removed");
    }
    const auto nap = std::clamp<std::chrono::milliseconds>(
        std::chrono::milliseconds(s->wait_hint_ms / 10), std::chrono::milliseconds(100),
        std::chrono::milliseconds(1000));
    std::this_thread::sleep_for(nap);
  }
  if (!::DeleteService(svc.get())) {
    const DWORD e = ::GetLastError();
    if (e != ERROR_SERVICE_MARKED_FOR_DELETE) {
      return win::os_error("cannot delete service " + name, e);
    }
    progress("service " + name + " was already marked for deletion");
  }
  return {};
}

}  // namespace baton::os
