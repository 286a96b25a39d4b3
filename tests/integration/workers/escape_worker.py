#!/usr/bin/env python3
"""A worker that tries to leave processes behind, then trains as the example worker does.

    escape_worker.py PIDS_DIR MIB [empty-env]

Before it becomes configs/examples/python-worker/train.py (by exec, so the worker's pid, stdin
and stdout stay the supervisor's), it starts:
  - a plain child, which stays in the worker's process group and sleeps;
  - an escapee: a child calls setsid() (a session and group of its own) and forks again, and
    its child, re-parented away from the worker once the middle one exits, holds MIB MiB of
    touched memory and sleeps (in the job's first worker, BATON_SHARD_INDEX 0; later workers'
    escapees hold 1 MiB, so the job can make progress once the first one's is gone). With
    `empty-env` the escapee first re-execs itself with an
    empty environment, so it carries no BATON_* variable that could give it away.
Each appends "<kind> <pid>" to PIDS_DIR/pids. The worker waits for the escapee's line, so the
memory is held by the time training starts. Used by tests/integration/escape_test.cpp.
"""
import os
import signal
import sys
import time
from pathlib import Path


def note(pids_dir, kind):
    with open(os.path.join(pids_dir, "pids"), "a") as f:
        f.write("%s %d\n" % (kind, os.getpid()))
        f.flush()
        os.fsync(f.fileno())


def hold(pids_dir, mib):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only a kill may end it
    hog = bytearray(mib << 20)
    for i in range(0, len(hog), 4096):
        hog[i] = 1
    note(pids_dir, "escapee")
    while True:
        time.sleep(1)


def main():
    if sys.argv[1] == "--hold":
        hold(sys.argv[2], int(sys.argv[3]))
        return
    pids_dir, mib = sys.argv[1], int(sys.argv[2])
    if os.environ.get("BATON_SHARD_INDEX", "0") != "0":
        mib = 1
    empty_env = len(sys.argv) > 3 and sys.argv[3] == "empty-env"
    note(pids_dir, "worker")
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        note(pids_dir, "child")
        while True:
            time.sleep(1)
    if os.fork() == 0:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        if empty_env:
            os.execve(sys.executable, [sys.executable, __file__, "--hold", pids_dir, str(mib)], {})
        hold(pids_dir, mib)
    os.wait()  # the middle process, gone at once
    mine = "escapee"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(os.path.join(pids_dir, "pids")) as f:
            seen = [line.split() for line in f]
        # The newest escapee must come after this worker's own line.
        after = False
        for kind, pid in seen:
            if kind == "worker" and int(pid) == os.getpid():
                after = True
            elif after and kind == mine:
                deadline = 0
                break
        time.sleep(0.02)
    train = Path(__file__).resolve().parents[3] / "configs/examples/python-worker/train.py"
    os.execv(sys.executable, [sys.executable, str(train)])


main()
