"""baton.preload: the fork server behind ``worker.preload`` (a parent that imports once, never trains).

The supervisor starts ``python -m baton.preload --import torch ...`` with fd 3 one end of a unix
SOCK_SEQPACKET socketpair (the control channel). The parent imports the modules, then refuses to
serve if the imports started threads that a fork does not stop: ``fork()`` copies only the
calling thread, so a library whose import starts threads (TensorFlow's runtime) would leave its
locks held and its queues without workers in every child. A pool its library stops in a fork
handler (OpenBLAS's) is safe, and a probe fork tells the two apart. Otherwise it says
``{"ready": true}`` and serves fork requests, one message each:

    {"argv": ["python", "train.py", ...], "env": ["K=V", ...], "cwd": "/job",
     "supervisor_pid": 123}
    with SCM_RIGHTS: [stdin, stdout, stderr, go]

The shard is forked ahead, while the server is idle: a child calls ``setsid()`` and forks
again, so the shard (the grandchild, leader of its own process group) is re-parented to the
supervisor, a subreaper, and owes the server nothing; it waits on a socket of its own. A
request is checked and handed to that spare with its fds (installed as 0, 1, 2), and the reply
is ``{"pid": N}`` at once, or ``{"error": "..."}``: a bad request gets an error and the server
goes on. Then the next spare is forked. The shard waits for one byte on ``go`` (the supervisor first moves it into the
job's cgroup, so nothing of the shard runs uncontained), then takes argv, environment and
working folder from the request and runs the script as ``__main__``. The server ends when the
control channel closes.

Example (what the supervisor does, by hand)::

    import socket, subprocess, sys
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    subprocess.Popen([sys.executable, "-m", "baton.preload", "--import", "json"],
                     pass_fds=[theirs.fileno()])  # as fd 3 in the real thing
"""
from __future__ import annotations

import argparse
import array
import atexit
import ctypes
import importlib
import json
import os
import re
import runpy
import signal
import socket
import sys
import threading
import time
from typing import Any, Optional

CONTROL_FD = 3
MAX_MODULES = 64
MAX_REQUEST_BYTES = 128 << 10  # below the socket buffer: a SEQPACKET message must fit it whole
FDS_PER_REQUEST = 4
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PR_SET_PDEATHSIG = 1


class RequestError(ValueError):
    """A fork request the server cannot carry out; the reply names why."""


def thread_count() -> int:
    """Threads of this process, Python's and native ones (/proc/self/task counts both).

    Example::

        assert thread_count() >= 1
    """
    try:
        native = len(os.listdir("/proc/self/task"))
    except OSError:
        native = 1
    return max(native, threading.active_count())


def import_modules(names: list[str]) -> Optional[str]:
    """Imports `names` in order; returns why the server must not fork after them, or None.

    Example::

        assert import_modules(["json"]) is None
    """
    if len(names) > MAX_MODULES:
        return f"worker.preload: at most {MAX_MODULES} modules, got {len(names)}"
    for name in names:
        if not _MODULE_NAME.match(name):
            return f"worker.preload: {name!r} is not a module name (dotted identifiers)"
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - an import may raise anything, even SystemExit
            return f"worker.preload: import {name} failed: {type(e).__name__}: {e}"
        n = thread_count()
        if n > 1:
            n = threads_left_after_a_fork()
        if n > 1:
            return (f"worker.preload: importing {name} started threads ({n} in the process) "
                    "that a fork does not stop; forking after that is unsafe (the child gets the "
                    "threads' locks but not the threads: TensorFlow is one such library). Leave "
                    "worker.preload out for it.")
    return None


def threads_left_after_a_fork(settle_s: float = 0.5) -> int:
    """Forks a child that exits at once, then counts this process's threads again.

    Some libraries start a thread pool at import but stop it in a fork handler of their own
    (``pthread_atfork``, ``os.register_at_fork``) and start it again at their next call: OpenBLAS
    does, and Debian's torch loads it whenever it is the system's BLAS, so ``import torch``
    leaves two threads on a 2-core machine. Those threads are gone in every fork, so they do not
    make forking unsafe; threads that survive this probe do. A joined thread may linger in
    /proc for a moment, hence a short settle.

    Example::

        assert threads_left_after_a_fork() == 1   # in a process that started no threads
    """
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + settle_s
    n = thread_count()
    while n > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
        n = thread_count()
    return n


def parse_request(data: bytes, fds: list[int]) -> dict[str, Any]:
    """Checks one fork request; raises RequestError with a message naming what is wrong.

    Example::

        r = parse_request(b'{"argv": ["python", "t.py"], "env": [], "cwd": "/"}', [0, 1, 2, 3])
        assert r["argv"][1] == "t.py"
    """
    if len(fds) != FDS_PER_REQUEST:
        raise RequestError(f"expected {FDS_PER_REQUEST} fds (stdin, stdout, stderr, go), "
                           f"got {len(fds)}")
    try:
        req = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"request is not JSON: {e}") from None
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")
    argv, env, cwd = req.get("argv"), req.get("env"), req.get("cwd")
    if (not isinstance(argv, list) or len(argv) < 2
            or not all(isinstance(a, str) and "\0" not in a for a in argv)):
        raise RequestError("argv must be [python, script, args...] (strings)")
    if not isinstance(env, list) or not all(isinstance(e, str) and "=" in e and "\0" not in e
                                            for e in env):
        raise RequestError('env must be a list of "NAME=value" strings')
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        raise RequestError("cwd must be a folder path")
    sup = req.get("supervisor_pid", 0)
    if not isinstance(sup, int) or isinstance(sup, bool) or sup < 0:
        raise RequestError("supervisor_pid must be a non-negative integer")
    return {"argv": argv, "env": env, "cwd": cwd, "supervisor_pid": sup}


def _die_with_parent(expected_parent: int) -> None:
    """SIGKILL when the supervisor dies, as a spawned worker has (PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if expected_parent and os.getppid() != expected_parent:
        os._exit(127)  # the supervisor died before the signal was armed


def _run_shard(req: dict[str, Any], go_fd: int) -> None:
    """In the grandchild: wait to be let go, become the request's process, run its script."""
    try:
        byte = os.read(go_fd, 1)
    except OSError:
        byte = b""
    if byte != b"\1":
        os._exit(126)  # the supervisor gave up on this shard before letting it run
    os.close(go_fd)
    _die_with_parent(req["supervisor_pid"])
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    script = req["argv"][1]
    code = 0
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        for entry in req["env"]:
            k, _, v = entry.partition("=")
            os.environ[k] = v
        sys.argv = req["argv"][1:]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: traceback, exit 1
        import traceback
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


class _Spare:
    """A shard forked ahead of its request: a grandchild of the server, re-parented to the
    supervisor (a subreaper) and waiting on a socket of its own for the request and its fds.
    A fork request then costs a send instead of two forks, each as slow as the imports are big
    (page tables, the middle process's exit): the forks happen while the server is idle."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock


def _make_spare() -> _Spare:
    """Double-forks a spare shard and reaps the middle process, which exits at once."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            ours.close()
            os.setsid()
            shard = os.fork()
            if shard == 0:
                _spare_main(theirs.fileno())
            os.write(w, str(shard).encode())
            os._exit(0)
        except BaseException:  # noqa: BLE001 - nothing may return into the server's loop
            os._exit(127)
    os.close(w)
    theirs.close()
    try:
        out = os.read(r, 32)
    finally:
        os.close(r)
        os.waitpid(child, 0)
    if not out:
        ours.close()
        raise OSError("fork failed in the shard's parent")
    return _Spare(int(out), ours)


def _spare_main(sock_fd: int) -> None:
    """In the spare: hold nothing of the server's, wait for the request, become the shard."""
    try:
        # Its own process group, led by its pid, as a spawned worker's: the supervisor signals
        # the group by the pid it was given.
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)  # the server's pipes: their ends must not wait on a spare
        # Every other inherited fd, up to the process limit (a fixed bound would miss fds past
        # it under a raised RLIMIT_NOFILE).
        top = max(sock_fd + 1, os.sysconf("SC_OPEN_MAX"))
        os.closerange(3, sock_fd)
        os.closerange(sock_fd + 1, top)
        sock = socket.socket(fileno=sock_fd)
        data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, FDS_PER_REQUEST + 4)
        sock.close()
        if not data or len(fds) != FDS_PER_REQUEST:
            os._exit(0)  # the server ended (or gave up on this spare) before a request came
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        go = fds[3]
        for fd in fds[:3]:
            if fd > 2:
                os.close(fd)
        _run_shard(json.loads(data.decode("utf-8")), go)
    except BaseException:  # noqa: BLE001 - a spare never returns into the server's loop
        os._exit(127)


def _hand_over(spare: Optional[_Spare], req: dict[str, Any], fds: list[int]) -> int:
    """Gives the checked request and its fds to a spare (a new one if it died); its pid."""
    payload = json.dumps(req).encode()
    for attempt in range(2):
        if spare is None:
            spare = _make_spare()
        try:
            socket.send_fds(spare.sock, [payload], fds)
            return spare.pid
        except OSError:
            if attempt == 1:
                raise
        finally:
            spare.sock.close()
        spare = None  # it died while waiting (killed): a fresh one, once
    raise AssertionError("unreachable")


def serve(sock: socket.socket, spare: Optional[_Spare] = None) -> None:
    """Serves fork requests on `sock` until it closes (with `spare` the first one's shard).
    Never raises on a bad request.

    Example::

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # serve(theirs) in a server; ours.send(...) with 4 fds from the supervisor
    """
    while True:
        if spare is None:
            try:
                spare = _make_spare()
            except OSError:
                spare = None  # forked at the request, which reports the failure
        try:
            data, fds, flags, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, FDS_PER_REQUEST + 4)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data and not fds:
            return  # the supervisor closed the channel: the job ended
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise RequestError(f"request too big (at most {MAX_REQUEST_BYTES} bytes and "
                                   f"{FDS_PER_REQUEST} fds)")
            req = parse_request(data, fds)
            taken, spare = spare, None
            reply: dict[str, Any] = {"pid": _hand_over(taken, req, fds)}
        except (RequestError, OSError) as e:
            reply = {"error": f"fork request: {e}"}
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            sock.send(json.dumps(reply).encode())
        except OSError:
            return


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of ``python -m baton.preload``.

    Example::

        python -m baton.preload --import torch --import numpy   # fd 3: the control socket
    """
    p = argparse.ArgumentParser(prog="python -m baton.preload")
    p.add_argument("--import", dest="modules", action="append", default=[],
                   help="a module to import before serving (repeatable)")
    p.add_argument("--fd", type=int, default=CONTROL_FD, help="the control socket's fd")
    args = p.parse_args(argv)
    try:
        sock = socket.socket(fileno=args.fd)
    except OSError as e:
        print(f"baton.preload: fd {args.fd} is not the control socket: {e}", file=sys.stderr)
        return 2
    why = import_modules(args.modules)
    if why is not None:
        try:
            sock.send(json.dumps({"error": why}).encode())
        except OSError:
            pass
        print(why, file=sys.stderr)
        return 2
    try:
        spare: Optional[_Spare] = _make_spare()  # before "ready": the first shard is quick too
    except OSError:
        spare = None
    sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(sock, spare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
