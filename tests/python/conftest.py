"""Shared helpers: run a script as a baton worker (a fake supervisor: BATON_* environment,
pipes) and read its protocol lines."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "python"
PY = sys.executable


class Worker:
    """A worker process under a fake supervisor."""

    def __init__(self, script, tmp_path, env=None, job=None, stdin_open=True):
        self.ckpt = tmp_path / "ckpt"
        self.staging = self.ckpt / ".staging-0"
        self.staging.mkdir(parents=True, exist_ok=True)
        job_file = tmp_path / "job.json"
        job_file.write_text(json.dumps(job or {"name": "t"}))
        e = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
        e.update({"BATON_PROTOCOL_VERSION": "1", "BATON_JOB_ID": "t",
                  "BATON_JOB_FILE": str(job_file),
                  "BATON_JOB_DIR": str(tmp_path), "BATON_CHECKPOINT_DIR": str(self.ckpt),
                  "BATON_SHARD_INDEX": "0", "BATON_START_STEP": "0",
                  "BATON_STAGING_DIR": str(self.staging),
                  "PYTHONPATH": str(PYTHON_DIR), "PYTHONUNBUFFERED": "1"})
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        self.proc = subprocess.Popen([PY, str(script)], env=e, cwd=str(tmp_path),
                                     stdin=subprocess.PIPE if stdin_open else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []

    def read_message(self, timeout=30):
        line = self.proc.stdout.readline()
        assert line, "worker closed stdout; stderr:\n" + self.proc.stderr.read().decode()
        msg = json.loads(line)
        self.lines.append(msg)
        return msg

    def wait_for(self, type_, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.read_message()
            if m["type"] == type_:
                return m
        raise AssertionError("no %s message" % type_)

    def send(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def drain(self):
        """Read protocol lines until the worker closes stdout, keeping stdin open (so a stop can
        still be sent meanwhile, from another thread)."""
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.append(json.loads(raw))

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        for raw in out.splitlines():
            self.lines.append(json.loads(raw))
        self.stderr = err.decode()
        return self.proc.returncode


@pytest.fixture
def worker(tmp_path):
    made = []

    def start(script, **kw):
        w = Worker(script, tmp_path, **kw)
        made.append(w)
        return w

    yield start
    for w in made:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def write_script(tmp_path, text, name="trainer.py"):
    p = tmp_path / name
    p.write_text(text)
    return p
