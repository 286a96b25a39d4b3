"""baton.preload, the fork server behind worker.preload: refuses imports that start threads,
forks shards that run a script with the request's argv, environment and folder only after they
are let go, and answers bad requests with an error without dying."""
import ctypes
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="module", autouse=True)
def subreaper():
    """Shards are grandchildren of the server, re-parented to the nearest subreaper: be it, as
    the supervisor is, so their exit status is ours to read."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class Server:
    def __init__(self, tmp_path, modules=(), extra_path=None):
        self.ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "python")] + ([str(extra_path)] if extra_path else []))
        args = [sys.executable, "-m", "baton.preload", "--fd", str(theirs.fileno())]
        for m in modules:
            args += ["--import", m]
        self.proc = subprocess.Popen(args, pass_fds=[theirs.fileno()], env=env,
                                     stderr=subprocess.PIPE)
        theirs.close()
        self.ours.settimeout(30)
        self.hello = json.loads(self.ours.recv(1 << 16))

    def request(self, body, fds):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        socket.send_fds(self.ours, [data], fds)
        return json.loads(self.ours.recv(1 << 16))

    def close(self):
        self.ours.close()
        return self.proc.wait(timeout=30)


class Shard:
    """The pipes a supervisor makes for one shard, and its fork request."""

    def __init__(self, server, script, cwd, env, args=()):
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        self.go_r, self.go_w = os.pipe()
        req = {"argv": ["python", str(script), *args], "env": env, "cwd": str(cwd),
               "supervisor_pid": os.getpid()}
        self.reply = server.request(req, [self.in_r, self.out_w, self.err_w, self.go_r])
        for fd in (self.in_r, self.out_w, self.err_w, self.go_r):
            os.close(fd)

    def go(self):
        os.write(self.go_w, b"\1")
        os.close(self.go_w)

    def finish(self):
        os.close(self.in_w)
        out = os.read(self.out_r, 1 << 20).decode()
        _, st = os.waitpid(self.reply["pid"], 0)
        return out, os.waitstatus_to_exitcode(st)


SCRIPT = """\
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "mark": os.environ.get("MARK"),
                  "home": os.environ.get("HOME"), "name": __name__,
                  "pgid": os.getpgid(0) == os.getpid(), "sid": os.getsid(0) != os.getsid(os.getppid()), "line": sys.stdin.readline().strip()}))
sys.exit(int(os.environ.get("CODE", "0")))
"""


def test_forks_a_shard_that_runs_only_after_go(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    s = Server(tmp_path, ["json"])
    assert s.hello["ready"] is True
    shard = Shard(s, script, tmp_path, ["MARK=shard-0", "CODE=3"], ["--epochs", "2"])
    assert "pid" in shard.reply, shard.reply
    # Not yet let go: it must not have run a line of the script.
    time.sleep(0.2)
    os.set_blocking(shard.out_r, False)
    with pytest.raises(BlockingIOError):
        os.read(shard.out_r, 1)
    os.set_blocking(shard.out_r, True)
    assert os.getppid() != shard.reply["pid"]
    with open(f"/proc/{shard.reply['pid']}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()  # re-parented to us
    shard.go()
    os.write(shard.in_w, b"hello\n")
    out, code = shard.finish()
    got = json.loads(out)
    assert got == {"argv": [str(script), "--epochs", "2"], "cwd": str(tmp_path),
                   "mark": "shard-0", "home": None, "name": "__main__", "pgid": True, "sid": True,
                   "line": "hello"}
    assert code == 3
    assert s.close() == 0  # the channel closed: the server ends


def test_shard_given_up_before_go_never_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').write('x')\n")
    s = Server(tmp_path)
    shard = Shard(s, script, tmp_path, [])
    os.close(shard.go_w)  # no byte: the supervisor could not contain it
    os.close(shard.in_w)
    _, st = os.waitpid(shard.reply["pid"], 0)
    assert os.waitstatus_to_exitcode(st) == 126
    assert not (tmp_path / "ran").exists()
    s.close()


def test_bad_requests_get_an_error_and_the_server_goes_on(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    s = Server(tmp_path)
    r, w = os.pipe()
    bad = [
        (b"not json", [r, r, r, r], "not JSON"),
        (b"[1, 2]", [r, r, r, r], "JSON object"),
        ({"argv": ["python"], "env": [], "cwd": "/"}, [r, r, r, r], "argv"),
        ({"argv": ["python", "x.py"], "env": ["NOEQUALS"], "cwd": "/"}, [r, r, r, r], "env"),
        ({"argv": ["python", "x.py"], "env": [], "cwd": ""}, [r, r, r, r], "cwd"),
        ({"argv": ["python", "x.py"], "env": [], "cwd": "/"}, [r], "expected 4 fds"),
        (b"x" * (160 << 10), [r, r, r, r], "too big"),
    ]
    for body, fds, why in bad:
        reply = s.request(body, fds)
        assert "error" in reply and why in reply["error"], (why, reply)
    assert s.proc.poll() is None
    shard = Shard(s, script, tmp_path, ["MARK=after"])
    shard.go()
    out, code = shard.finish()
    assert json.loads(out)["mark"] == "after" and code == 0
    s.close()


def test_refuses_an_import_that_starts_threads(tmp_path):
    (tmp_path / "threaded_mod.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    s = Server(tmp_path, ["json", "threaded_mod"], extra_path=tmp_path)
    assert "error" in s.hello
    assert "threaded_mod started threads" in s.hello["error"]
    assert "TensorFlow" in s.hello["error"]
    assert s.proc.wait(timeout=30) == 2


def test_serves_after_an_import_whose_pool_a_fork_handler_stops(tmp_path):
    """OpenBLAS's way: a pool started at import, stopped before each fork (pthread_atfork) and
    started again at the next call. No thread of it reaches a child, so the server serves."""
    (tmp_path / "pooled_mod.py").write_text(
        "import os, threading\n"
        "_stop = threading.Event()\n"
        "_pool = [threading.Thread(target=_stop.wait, daemon=True)]\n"
        "_pool[0].start()\n"
        "def _shut_down():\n"
        "    _stop.set()\n"
        "    for t in _pool:\n"
        "        t.join()\n"
        "    _pool.clear()\n"
        "os.register_at_fork(before=_shut_down)\n")
    script = tmp_path / "train.py"
    script.write_text("import os, pooled_mod\nprint(len(os.listdir('/proc/self/task')))\n")
    s = Server(tmp_path, ["json", "pooled_mod"], extra_path=tmp_path)
    assert s.hello.get("ready") is True, s.hello
    shard = Shard(s, script, tmp_path, [f"PYTHONPATH={tmp_path}"])
    shard.go()
    out, code = shard.finish()
    assert (out.strip(), code) == ("1", 0)
    s.close()


@pytest.mark.parametrize("name,why", [("os; rm", "not a module name"),
                                      ("no_such_module_xyz", "import no_such_module_xyz failed")])
def test_refuses_bad_or_missing_modules(tmp_path, name, why):
    s = Server(tmp_path, [name])
    assert why in s.hello["error"]
    assert s.proc.wait(timeout=30) == 2


def test_a_crashing_script_exits_1_with_its_traceback(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise RuntimeError('boom')\n")
    s = Server(tmp_path)
    shard = Shard(s, script, tmp_path, [])
    shard.go()
    _, code = shard.finish()
    assert code == 1
    assert b"RuntimeError: boom" in os.read(shard.err_r, 1 << 16)
    s.close()
