#!/usr/bin/env python3
"""The chaos driver's worker: the example trainer, turned hostile when the driver orders it.

    attacker.py TRAIN_PY

Every worker of a chaos job starts here. With no order waiting it becomes TRAIN_PY at once (by
exec: same pid, stdin and stdout), so it is the example worker and nothing else. The driver
orders an attack by writing a file named after the job id into $BATON_CHAOS_ORDERS; the next
worker of that job claims it (a rename to <id>.claimed.<pid>: exactly one worker gets it),
carries the attack out and writes what it did to <id>.done.<pid> as JSON, for the driver to
check. The attacks change no arithmetic, so the job's final weights still equal an undisturbed
run's. Orders (one line):

  escape MIB  a child calls setsid() and forks again; its child re-execs itself with an empty
              environment (no BATON_* variable gives it away), holds MIB MiB of touched memory,
              ignores SIGTERM and sleeps. Then this worker trains. The daemon must count that
              memory against the job and leave no such process once the worker has ended.
  flood       before training, writes a 50 MiB line without a newline break, then 20,000 short
              lines of garbage, on the protocol's stdout. The daemon must cut the long line,
              keep the rest as log text and go on answering.
  bad-path K  trains as the example does, but through a pipe: after the trainer's first
              checkpoint announcement it plants an entry of kind K where the next checkpoint
              would be and announces it as that checkpoint. K: fifo (a blocking open would hang
              the daemon), dev-zero (a symlink to /dev/zero: an unbounded read), sparse (a 1.5 GiB
              sparse file), symlink-out (a symlink to a checkpoint-sized file outside the state
              dir). The daemon must reject it without blocking, move it aside, and resume from
              the last good checkpoint.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time


def hold(mib, pid_file):
    """The escapee's body: memory that only a kill of the job's processes frees."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hog = bytearray(mib << 20)
    for i in range(0, len(hog), 4096):
        hog[i] = 1
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    while True:
        time.sleep(1)


def escape(mib, pid_file):
    """setsid + double fork; the grandchild re-execs with an empty environment."""
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, __file__, "--hold", str(mib), pid_file], {})
        os._exit(0)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 10
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(pid_file) as f:
        return int(f.read())


def flood():
    out = sys.stdout.buffer
    chunk = b"x" * (1 << 20)
    for _ in range(50):
        out.write(chunk)
    out.write(b"\n")
    for i in range(20000):
        out.write(b"chaos flood line %d: not protocol, only noise\n" % i)
    out.flush()


def plant(kind, path, outside_dir):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(1536 << 20)
    elif kind == "symlink-out":
        target = os.path.join(outside_dir, "outside.safetensors")
        with open(target, "wb") as f:
            f.write(b"\0" * 4096)
        os.symlink(target, path)
    else:
        raise SystemExit("attacker: unknown bad-path kind %r" % kind)


def proxy_with_bad_path(train_py, kind, outside_dir, report):
    """Runs the trainer as a child behind pipes and injects one bad announcement."""
    child = subprocess.Popen([sys.executable, train_py], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)

    def on_term(signum, frame):  # die of it as the trainer would, taking it along
        child.send_signal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)

    def pump_stdin():
        try:
            for line in sys.stdin.buffer:
                child.stdin.write(line)
                child.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass

    threading.Thread(target=pump_stdin, daemon=True).start()
    out = sys.stdout.buffer
    injected = False
    for line in child.stdout:
        out.write(line)
        out.flush()
        if injected:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or msg.get("type") != "checkpoint" or "digest" not in msg:
            continue
        step = int(msg["step"]) + 1
        path = os.path.join(os.path.dirname(msg["path"]), "ckpt-%012d.safetensors" % step)
        plant(kind, path, outside_dir)
        report({"attack": "bad-path", "kind": kind, "path": path, "step": step})
        out.write((json.dumps({"type": "checkpoint", "path": path, "step": step,
                               "digest": "xxh64:0000000000000000"}) + "\n").encode())
        out.flush()
        injected = True
    rc = child.wait()
    if not injected:
        report({"attack": "bad-path", "kind": kind, "path": None, "step": None})
    if rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    sys.exit(rc)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--hold":
        hold(int(sys.argv[2]), sys.argv[3])
        return
    train_py = sys.argv[1]
    orders = os.environ.get("BATON_CHAOS_ORDERS")
    job = os.environ.get("BATON_JOB_ID", "")
    order = None
    if orders and job:
        mine = os.path.join(orders, "%s.claimed.%d" % (job, os.getpid()))
        try:
            os.rename(os.path.join(orders, job), mine)
            with open(mine) as f:
                order = f.read().split()
        except FileNotFoundError:
            pass

    def report(what):
        what["pid"] = os.getpid()
        done = os.path.join(orders, "%s.done.%d" % (job, os.getpid()))
        with open(done + ".tmp", "w") as f:
            json.dump(what, f)
        os.replace(done + ".tmp", done)

    if order and order[0] == "escape":
        pid_file = os.path.join(orders, "%s.escapee.%d" % (job, os.getpid()))
        report({"attack": "escape", "escapee": escape(int(order[1]), pid_file)})
    elif order and order[0] == "flood":
        flood()
        report({"attack": "flood"})
    elif order and order[0] == "bad-path":
        proxy_with_bad_path(train_py, order[1], orders, report)
        return
    elif order:
        raise SystemExit("attacker: unknown order %r" % order)
    os.execv(sys.executable, [sys.executable, train_py])


if __name__ == "__main__":
    main()
