"""baton.preload: the fork server behind ``worker.preload`` (a parent that imports once, never trains).

The supervisor starts ``python -m baton.preload --import torch ...`` with fd 3 one end of a unix
SOCK_SEQPACKET socketpair (the control channel). The parent imports the modules, then refuses to
serve if the imports started threads: ``fork()`` copies only the calling thread, so a library
whose import starts threads (TensorFlow's runtime, some BLAS pools) would leave its locks held
and its queues without workers in every child. Otherwise it says ``{"ready": true}`` and serves
fork requests, one message each:

    {"argv": ["python", "train.py", ...], "env": ["K=V", ...], "cwd": "/job",
     "supervisor_pid": 123}
    with SCM_RIGHTS: [stdin, stdout, stderr, go]

It forks; the child calls ``setsid()``, installs the fds as 0, 1, 2 and forks again, so the
shard (the grandchild, leader of its own process group) is re-parented to the supervisor, a
subreaper, and owes the server nothing. The reply is ``{"pid": N}`` or ``{"error": "..."}``; a bad request gets an error and the
server goes on. The shard waits for one byte on ``go`` (the supervisor first moves it into the
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
            return (f"worker.preload: importing {name} started threads ({n} in the process); "
                    "forking after that is unsafe (the child gets the threads' locks but not the "
                    "threads: TensorFlow is one such library). Leave worker.preload out for it.")
    return None


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


def _fork_shard(req: dict[str, Any], fds: list[int]) -> tuple[int, int]:
    """Double-forks the shard; returns its pid (a grandchild, re-parented to the supervisor once
    the middle process exits) and the middle one's, which the caller reaps after replying."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            os.setsid()
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            go = os.dup(fds[3])
            shard = os.fork()
            if shard == 0:
                # Its own process group, led by its pid, as a spawned worker's: the
                # supervisor signals the group by the pid it was given.
                os.setpgid(0, 0)
                os.closerange(3, go)
                # Every other inherited fd, up to the process limit (a fixed bound would miss
                # fds past it under a raised RLIMIT_NOFILE).
                os.closerange(go + 1, max(go + 1, os.sysconf("SC_OPEN_MAX")))
                _run_shard(req, go)
            os.write(w, str(shard).encode())
            os._exit(0)
        except BaseException:  # noqa: BLE001 - nothing may return into the server's loop
            os._exit(127)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    if not out:
        os.waitpid(child, 0)
        raise RequestError("fork failed in the shard's parent")
    return int(out), child


def serve(sock: socket.socket) -> None:
    """Serves fork requests on `sock` until it closes. Never raises on a bad request.

    Example::

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # serve(theirs) in a server; ours.send(...) with 4 fds from the supervisor
    """
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, FDS_PER_REQUEST + 4)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data and not fds:
            return  # the supervisor closed the channel: the job ended
        middle = 0
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise RequestError(f"request too big (at most {MAX_REQUEST_BYTES} bytes and "
                                   f"{FDS_PER_REQUEST} fds)")
            req = parse_request(data, fds)
            shard, middle = _fork_shard(req, fds)
            reply: dict[str, Any] = {"pid": shard}
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
        finally:
            # After the reply: the supervisor moves the shard into its cgroup while the middle
            # process's exit (an address space as big as the imports) runs.
            if middle:
                try:
                    os.waitpid(middle, 0)
                except ChildProcessError:
                    pass


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
    sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
