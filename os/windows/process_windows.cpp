// Windows process control on plain CreateProcessW. Each worker starts suspended, joins its own
// Job Object (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: when the supervisor dies, the kernel closes
// the job handle and kills every process in it), then resumes; the job is the Windows stand-in
// for the POSIX process group. stdout/stdin are named pipes whose supervisor ends are
// overlapped (Asio needs that; anonymous pipes cannot do overlapped I/O) and whose child ends
// are ordinary blocking handles, which is what the C runtime expects.
// <windows.h> (via win_util.h) must precede the other Win32 headers.
// clang-format off
#include "os/windows/win_util.h"
#include <psapi.h>
#include <tlhelp32.h>
// clang-format on

#include <array>
#include <atomic>
#include <boost/asio/windows/object_handle.hpp>
#include <boost/asio/windows/stream_handle.hpp>
#include <cwctype>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "os/pipe_pump.h"
#include "os/process.h"
#include "os/windows_command_line.h"

namespace baton::os {

namespace asio = boost::asio;
using boost::system::error_code;
using win::os_error;
using win::unique_handle;
using win::utf8;
using win::widen;

namespace {

// TerminateJobObject exit codes, in the shell's 128+signal convention, so an exit the
// supervisor caused reads like its POSIX twin and is reported as signaled(15) / signaled(9).
constexpr UINT terminate_exit_code = 128 + 15;
constexpr UINT kill_exit_code = 128 + 9;

// Serialises spawns: the child's pipe ends are inheritable from their creation until they are
// closed after CreateProcessW; no other spawn may inherit them in between (where the handle list
// below is not honoured, e.g. older wine, this is the only guard).
std::mutex spawn_mutex;

std::wstring command_line(const std::vector<std::string>& argv) {
  return widen(windows_command_line(argv));
}

std::wstring upper(std::wstring s) {
  for (auto& c : s) c = static_cast<wchar_t>(std::towupper(c));
  return s;
}

// The supervisor's environment with `extra` added, later entries replacing earlier ones. Names
// compare case-insensitively, as Windows does; the block is sorted, as CreateProcessW documents.
std::wstring environment_block(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::wstring, std::wstring> vars;  // upper-cased name -> "Name=value"
  if (wchar_t* block = ::GetEnvironmentStringsW()) {
    for (const wchar_t* p = block; *p != L'\0'; p += std::wcslen(p) + 1) {
      const std::wstring entry(p);
      // Entries like "=C:=C:\dir" (per-drive folders) start with '=': keep them whole.
      const auto eq = entry.find(L'=', 1);
      vars[upper(entry.substr(0, eq))] = entry;
    }
    ::FreeEnvironmentStringsW(block);
  }
  for (const auto& [k, v] : extra) vars[upper(widen(k))] = widen(k) + L"=" + widen(v);
  std::wstring out;
  for (const auto& [key, entry] : vars) {
    out += entry;
    out += L'\0';
  }
  out += L'\0';
  return out;
}

// CreateProcessW does search PATH, but also the supervisor's own folder and the current one
// first; resolve explicitly so the rule matches POSIX: a name with a separator is a path,
// anything else is looked up in PATH (".exe" added when missing).
result<std::wstring> resolve_program(const std::string& name,
                                     const std::vector<std::pair<std::string, std::string>>& env) {
  if (name.empty()) return make_error("spawn: argv[0] is empty");
  const std::wstring wname = widen(name);
  if (wname.find_first_of(L"/\\:") != std::wstring::npos) {
    const DWORD attrs = ::GetFileAttributesW(wname.c_str());
    if (attrs == INVALID_FILE_ATTRIBUTES) return os_error("spawn " + name);
    return wname;
  }
  // The PATH the child will have (the job's), else the supervisor's, as on POSIX.
  std::wstring path_var(32767, L'\0');
  const DWORD n =
      ::GetEnvironmentVariableW(L"PATH", path_var.data(), static_cast<DWORD>(path_var.size()));
  path_var.resize(n < path_var.size() ? n : 0);
  for (const auto& [key, value] : env) {
    if (upper(widen(key)) == L"PATH") path_var = widen(value);
  }
  std::wstring found(MAX_PATH * 4, L'\0');
  const DWORD len = ::SearchPathW(path_var.c_str(), wname.c_str(), L".exe",
                                  static_cast<DWORD>(found.size()), found.data(), nullptr);
  if (len == 0 || len >= found.size()) return make_error("spawn " + name + ": not found in PATH");
  found.resize(len);
  return found;
}

// A pipe whose supervisor end is overlapped and private, and whose child end is blocking and
// inheritable. `inbound`: the supervisor reads (the child's stdout).
struct pipe_pair {
  unique_handle parent;
  unique_handle child;
};

result<pipe_pair> make_pipe(bool inbound) {
  static std::atomic<unsigned> counter{0};
  const std::wstring name = L"\\\\.\\pipe\\baton-" + std::to_wstring(::GetCurrentProcessId()) +
                            L"-" + std::to_wstring(counter.fetch_add(1));
  pipe_pair p;
  p.parent.reset(::CreateNamedPipeW(
      name.c_str(),
      (inbound ? PIPE_ACCESS_INBOUND : PIPE_ACCESS_OUTBOUND) | FILE_FLAG_OVERLAPPED |
          FILE_FLAG_FIRST_PIPE_INSTANCE,
      PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS, 1, 64 * 1024,
      64 * 1024, 0, nullptr));
  if (!p.parent) return os_error("create pipe");
  SECURITY_ATTRIBUTES inherit{sizeof(SECURITY_ATTRIBUTES), nullptr, TRUE};
  p.child.reset(::CreateFileW(name.c_str(), inbound ? GENERIC_WRITE : GENERIC_READ, 0, &inherit,
                              OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!p.child) return os_error("open pipe");
  return p;
}

exit_status from_exit_code(DWORD code, bool terminated, bool killed) {
  if (killed && code == kill_exit_code) return exit_status::signaled(9);
  if (terminated && code == terminate_exit_code) return exit_status::signaled(15);
  return exit_status::exited(static_cast<int>(code));
}

// Creation time of a process, for telling a real parent from a dead one whose pid was reused.
std::uint64_t creation_time(HANDLE process) {
  FILETIME created{}, exited{}, kernel{}, user{};
  if (!::GetProcessTimes(process, &created, &exited, &kernel, &user)) return 0;
  return (std::uint64_t{created.dwHighDateTime} << 32) | created.dwLowDateTime;
}

result<std::uint64_t> working_set_of(HANDLE process) {
  PROCESS_MEMORY_COUNTERS counters{};
  counters.cb = sizeof counters;
  if (!::GetProcessMemoryInfo(process, &counters, sizeof counters)) {
    return os_error("memory of process " + std::to_string(::GetProcessId(process)));
  }
  return static_cast<std::uint64_t>(counters.WorkingSetSize);
}

// For memory sampling. QUERY_INFORMATION and VM_READ rather than QUERY_LIMITED_INFORMATION:
// GetProcessMemoryInfo documents VM_READ, and wine's IsProcessInJob refuses the limited right.
// A null handle with ERROR_INVALID_PARAMETER means the pid is gone.
unique_handle open_for_sampling(DWORD pid) {
  return unique_handle(
      ::OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ | SYNCHRONIZE, FALSE, pid));
}

// Working set of one process that may exit at any moment: one that has exited holds nothing.
result<std::uint64_t> sample(HANDLE h) {
  auto ws = working_set_of(h);
  if (!ws && ::WaitForSingleObject(h, 0) == WAIT_OBJECT_0) return 0;
  return ws;
}

// Descendants of `pid` from a toolhelp snapshot, parents before children. A process counts as a
// child only if it was created after its recorded parent: Windows reuses pids and does not
// re-parent orphans, so a stale parent pid can point at an unrelated newer process.
result<std::vector<DWORD>> descendants_of(DWORD root) {
  unique_handle snap(::CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0));
  if (!snap) return os_error("list processes");
  std::vector<std::pair<DWORD, DWORD>> table;  // pid, parent pid
  PROCESSENTRY32W entry{};
  entry.dwSize = sizeof entry;
  for (BOOL ok = ::Process32FirstW(snap.get(), &entry); ok;
       ok = ::Process32NextW(snap.get(), &entry)) {
    table.emplace_back(entry.th32ProcessID, entry.th32ParentProcessID);
  }
  const auto created = [](DWORD pid) -> std::uint64_t {
    unique_handle h(::OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid));
    return h ? creation_time(h.get()) : 0;
  };
  std::vector<DWORD> out;
  // A root that is gone (a worker that just exited: job_runner asks after every exit) has no
  // creation time to compare with, and its pid was likely some earlier process's too, whose
  // children still name it as parent: without this, every one of those strangers and all they
  // started would be killed. Under wine that was services.exe and every wine service, breaking
  // whatever test ran beside. What a dead worker started is in its job and dies with that.
  const std::uint64_t root_created = created(root);
  if (root_created == 0) return out;
  std::vector<std::pair<DWORD, std::uint64_t>> frontier{{root, root_created}};
  while (!frontier.empty()) {
    const auto [parent, parent_created] = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, ppid] : table) {
      if (ppid != parent || pid == parent || pid == root) continue;
      const auto t = created(pid);
      if (t == 0 || t < parent_created) continue;
      out.push_back(pid);
      frontier.emplace_back(pid, t);
    }
  }
  return out;
}

}  // namespace

class windows_process final : public process::impl,
                              public std::enable_shared_from_this<windows_process> {
 public:
  windows_process(asio::io_context& io, unique_handle process, unique_handle job, DWORD pid,
                  unique_handle out, unique_handle in, unique_handle err,
                  std::chrono::milliseconds read_pace)
      : waiter_(io, process.release()),
        job_(std::move(job)),
        pipes_(asio::windows::stream_handle(io, out.release()),
               asio::windows::stream_handle(io, in.release()), read_pace),
        pid_(pid) {
    if (err) err_.emplace(asio::windows::stream_handle(io, err.release()), read_pace);
  }

  // From spawn, before it returns: the worker must never block on a full stderr pipe.
  void start_stderr(chunk_handler on_chunk) {
    if (err_) err_->start_reading(std::move(on_chunk), shared_from_this());
  }

  std::int64_t pid() const override { return pid_; }
  bool exited() const override { return exited_; }

  void abandon() override {
    abandoned_ = true;
    on_exit_ = nullptr;
    // Also after the worker's own exit: whatever it started is still in the job. No pid reuse
    // risk here, the job handle names exactly these processes.
    killed_ = true;
    ::TerminateJobObject(job_.get(), kill_exit_code);
    pipes_.abandon();
    if (err_) err_->abandon();
    error_code ignored;
    waiter_.cancel(ignored);
  }

  void start_reading(line_handler on_line) override {
    pipes_.start_reading(std::move(on_line), shared_from_this());
  }

  void write_line(std::string line, write_handler on_done) override {
    pipes_.write_line(std::move(line), std::move(on_done), shared_from_this());
  }

  void close_stdin() override { pipes_.close_stdin(); }
  void read_unpaced() override { pipes_.read_now(shared_from_this()); }

  void wait(exit_handler on_exit) override {
    on_exit_ = std::move(on_exit);
    waiter_.async_wait([self = shared_from_this()](error_code ec) noexcept {
      exit_status st{};
      if (!ec) {
        DWORD code = 0;
        if (::GetExitCodeProcess(self->waiter_.native_handle(), &code)) {
          self->exited_ = true;
          st = from_exit_code(code, self->terminated_, self->killed_);
        } else {
          ec = error_code(static_cast<int>(::GetLastError()), boost::system::system_category());
        }
      }
      // Its last lines and the end of its output are wanted now, not at the next tick.
      self->pipes_.read_now(self);
      if (self->err_) self->err_->read_now(self);
      if (self->on_exit_ && !self->abandoned_) std::exchange(self->on_exit_, nullptr)(ec, st);
    });
  }

  status signal_group(group_signal sig) override {
    const bool kill = sig == group_signal::kill;
    (kill ? killed_ : terminated_) = true;
    if (!::TerminateJobObject(job_.get(), kill ? kill_exit_code : terminate_exit_code)) {
      return os_error("terminate job of process " + std::to_string(pid_));
    }
    return {};
  }

  // The working set of every process in the job: the worker and all it started.
  // The worker's Job Object holds it and every descendant (no breakaway is granted).
  bool contained() const override { return true; }

  result<std::uint64_t> rss_bytes() const override {
    std::vector<std::uint8_t> buf(sizeof(JOBOBJECT_BASIC_PROCESS_ID_LIST) + 64 * sizeof(ULONG_PTR));
    for (;;) {
      auto* list = reinterpret_cast<JOBOBJECT_BASIC_PROCESS_ID_LIST*>(buf.data());
      if (::QueryInformationJobObject(job_.get(), JobObjectBasicProcessIdList, list,
                                      static_cast<DWORD>(buf.size()), nullptr)) {
        if (list->NumberOfProcessIdsInList < list->NumberOfAssignedProcesses) {
          buf.resize(buf.size() * 2);  // the job grew between calls
          continue;
        }
        std::uint64_t sum = 0;
        for (DWORD i = 0; i < list->NumberOfProcessIdsInList; ++i) {
          const auto id = static_cast<DWORD>(list->ProcessIdList[i]);
          unique_handle h = open_for_sampling(id);
          if (!h) {
            if (::GetLastError() == ERROR_INVALID_PARAMETER) continue;  // exited since the list
            return os_error("memory of process " + std::to_string(id));
          }
          BOOL in_job = FALSE;
          if (!::IsProcessInJob(h.get(), job_.get(), &in_job)) {
            return os_error("memory of process " + std::to_string(id) + ": job membership");
          }
          if (!in_job) continue;  // exited, and its pid already reused by a stranger
          auto ws = sample(h.get());
          if (!ws) return ws.error();
          sum += *ws;
        }
        return sum;
      }
      if (::GetLastError() != ERROR_MORE_DATA) {
        return os_error("memory of process " + std::to_string(pid_) + ": list its job");
      }
      buf.resize(buf.size() * 2);
    }
  }

 private:
  asio::windows::object_handle waiter_;  // owns the process handle
  unique_handle job_;
  pipe_pump<asio::windows::stream_handle, asio::windows::stream_handle> pipes_;
  std::optional<chunk_reader<asio::windows::stream_handle>> err_;  // with on_stderr
  DWORD pid_;
  bool exited_ = false;
  bool abandoned_ = false;
  bool terminated_ = false;
  bool killed_ = false;
  exit_handler on_exit_;
};

result<std::unique_ptr<process>> spawn(asio::io_context& io, const spawn_options& options) {
  if (options.argv.empty()) return make_error("spawn: empty argv");
  const std::string& name = options.argv.front();
  const auto fail = [&name](const error& e) { return with_context("spawn " + name, e); };
  if (options.credentials) {
    return make_error("spawn " + name + ": running a worker as another user (uid " +
                      std::to_string(options.credentials->uid) +
                      ", jobs_run_as = \"submitter\") is not supported on Windows");
  }
  auto program = resolve_program(name, options.env);
  if (!program) return program.error();
  if (!options.working_dir.empty()) {
    std::error_code fec;
    if (!std::filesystem::is_directory(options.working_dir, fec)) {
      return make_error("spawn " + name + ": working folder " + utf8(options.working_dir) +
                        " is not a folder");
    }
  }

  // The job first: the worker must never run a single instruction outside it.
  unique_handle job(::CreateJobObjectW(nullptr, nullptr));
  if (!job) return fail(os_error("create job object"));
  JOBOBJECT_EXTENDED_LIMIT_INFORMATION limits{};
  // DIE_ON_UNHANDLED_EXCEPTION: a crash ends the worker instead of waiting on an error dialog.
  limits.BasicLimitInformation.LimitFlags =
      JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
  if (options.memory_backstop_bytes) {
    limits.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY;
    limits.ProcessMemoryLimit = static_cast<SIZE_T>(*options.memory_backstop_bytes);
  }
  if (!::SetInformationJobObject(job.get(), JobObjectExtendedLimitInformation, &limits,
                                 sizeof limits)) {
    return fail(os_error("set job limits"));
  }

  std::unique_lock lock(spawn_mutex);
  auto out = make_pipe(true);
  if (!out) return fail(out.error());
  auto in = make_pipe(false);
  if (!in) return fail(in.error());
  SECURITY_ATTRIBUTES inherit{sizeof(SECURITY_ATTRIBUTES), nullptr, TRUE};
  unique_handle err;
  unique_handle err_parent;  // our end of the stderr pipe, with on_stderr
  if (options.on_stderr) {
    auto p = make_pipe(true);
    if (!p) return fail(p.error());
    err = std::move(p->child);
    err_parent = std::move(p->parent);
  } else {
    const std::filesystem::path log =
        options.stderr_log.empty() ? std::filesystem::path(L"NUL") : options.stderr_log;
    err.reset(::CreateFileW(log.c_str(), FILE_APPEND_DATA,
                            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, &inherit,
                            OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
    if (!err) return fail(os_error("open stderr log " + utf8(log)));
  }

  // Only these three handles are inherited, whatever else in the supervisor is inheritable.
  std::array<HANDLE, 3> inherited{in->child.get(), out->child.get(), err.get()};
  SIZE_T attr_size = 0;
  ::InitializeProcThreadAttributeList(nullptr, 1, 0, &attr_size);
  std::vector<std::uint8_t> attr_buf(attr_size);
  auto* attrs = reinterpret_cast<LPPROC_THREAD_ATTRIBUTE_LIST>(attr_buf.data());
  if (!::InitializeProcThreadAttributeList(attrs, 1, 0, &attr_size)) {
    return fail(os_error("init attribute list"));
  }
  struct attr_cleanup {
    LPPROC_THREAD_ATTRIBUTE_LIST a;
    ~attr_cleanup() { ::DeleteProcThreadAttributeList(a); }
  } cleanup{attrs};
  if (!::UpdateProcThreadAttribute(attrs, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherited.data(),
                                   sizeof inherited, nullptr, nullptr)) {
    return fail(os_error("set inherited handles"));
  }

  STARTUPINFOEXW si{};
  si.StartupInfo.cb = sizeof si;
  si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
  si.StartupInfo.hStdInput = in->child.get();
  si.StartupInfo.hStdOutput = out->child.get();
  si.StartupInfo.hStdError = err.get();
  si.lpAttributeList = attrs;

  std::wstring cmd = command_line(options.argv);
  std::wstring env = environment_block(options.env);
  const std::wstring dir =
      options.working_dir.empty() ? std::wstring() : options.working_dir.native();
  // CREATE_NEW_PROCESS_GROUP: a Ctrl-C in the supervisor's console is not also delivered to the
  // workers; the supervisor stops them through the protocol, as on POSIX (own process group).
  const DWORD flags = CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT |
                      CREATE_NEW_PROCESS_GROUP;
  PROCESS_INFORMATION pi{};
  if (!::CreateProcessW(program->c_str(), cmd.data(), nullptr, nullptr, TRUE, flags, env.data(),
                        dir.empty() ? nullptr : dir.c_str(), &si.StartupInfo, &pi)) {
    return fail(os_error("create process"));
  }
  unique_handle proc(pi.hProcess), thread(pi.hThread);
  if (!::AssignProcessToJobObject(job.get(), proc.get())) {
    const DWORD code = ::GetLastError();
    ::TerminateProcess(proc.get(), kill_exit_code);
    return fail(os_error("assign to job object", code));
  }
  if (::ResumeThread(thread.get()) == static_cast<DWORD>(-1)) {
    const DWORD code = ::GetLastError();
    ::TerminateJobObject(job.get(), kill_exit_code);
    return fail(os_error("resume", code));
  }
  // The child holds its own copies of its pipe ends; ours must go, or end of output never comes.
  out->child.reset();
  in->child.reset();
  err.reset();
  lock.unlock();

  auto state = std::make_shared<windows_process>(
      io, std::move(proc), std::move(job), pi.dwProcessId, std::move(out->parent),
      std::move(in->parent), std::move(err_parent), options.read_pace);
  state->start_stderr(options.on_stderr);
  return std::make_unique<process>(std::move(state));
}

// Windows does not re-parent orphans to anyone: a worker's descendants stay in its job (no
// JOB_OBJECT_LIMIT_BREAKAWAY_OK is granted), and the job is what signal_group and the process
// destructor act on. Nothing to become.
status become_subreaper() { return {}; }

result<std::uint64_t> tree_rss_bytes(std::int64_t pid) {
  unique_handle h = open_for_sampling(static_cast<DWORD>(pid));
  if (!h) return os_error("memory of process " + std::to_string(pid));
  auto total = working_set_of(h.get());
  if (!total) return total.error();
  auto kids = descendants_of(static_cast<DWORD>(pid));
  if (!kids) return kids.error();
  std::uint64_t sum = *total;
  for (const DWORD d : *kids) {
    unique_handle k = open_for_sampling(d);
    if (!k) {
      if (::GetLastError() == ERROR_INVALID_PARAMETER) continue;  // exited since the snapshot
      return os_error("memory of process " + std::to_string(d));
    }
    auto ws = sample(k.get());
    if (!ws) return ws.error();
    sum += *ws;
  }
  return sum;
}

result<int> kill_descendants(std::int64_t pid) {
  auto kids = descendants_of(static_cast<DWORD>(pid));
  if (!kids) return kids.error();
  int killed = 0;
  for (const DWORD d : *kids) {
    unique_handle k(::OpenProcess(PROCESS_TERMINATE, FALSE, d));
    if (k && ::TerminateProcess(k.get(), kill_exit_code)) ++killed;
  }
  return killed;
}

// Orphans cannot escape a worker's job and are killed with it; there are none of our own.
result<int> kill_orphans() { return 0; }
result<int> kill_orphans_with_env(std::string_view, std::string_view) { return 0; }

// Windows has no zombies: an exited process is gone once its last handle closes.
result<int> reap_orphans() { return 0; }

// Each worker already runs in a Job Object of its own without breakaway, and KILL_ON_JOB_CLOSE
// ends it with the supervisor: nothing of a previous life survives to be found, and there is no
// cgroup to choose.
containment_report setup_containment(const containment_options&) { return current_containment(); }
containment_report current_containment() {
  containment_report r;
  r.mode = "job-object";
  r.detail = "a Job Object per worker (no breakaway, killed on close)";
  return r;
}

void end_containment() {}

struct child_reaper::impl {};
child_reaper::child_reaper(asio::io_context&) : impl_(std::make_shared<impl>()) {}
child_reaper::~child_reaper() = default;
int child_reaper::reaped() const { return 0; }

}  // namespace baton::os
