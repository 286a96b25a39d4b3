"""A command worker that leaks memory on purpose, for the Prometheus test's sawtooth.

Each step holds `leak_mib_per_step` MiB more (written, so it is resident) and takes `step_ms`;
a `stop` from baton (the soft limit) makes it checkpoint at the next step and exit, and the
fresh worker that resumes starts small again. Everything comes from `params` in BATON_JOB_FILE;
the checkpoint format and messages are chatty_worker.py's.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chatty_worker import EXIT_STOPPED, newest_step, save_checkpoint, send  # noqa: E402


def main():
    job = json.load(open(os.environ["BATON_JOB_FILE"]))
    params = job["params"]
    total = int(params["total_steps"])
    leak = int(float(params["leak_mib_per_step"]) * (1 << 20))
    step_s = float(params["step_ms"]) / 1000.0
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    keep = job.get("checkpoints", {}).get("keep", 2)

    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "leaky 1.0"})
    stop = threading.Event()

    def read_stdin():
        for line in sys.stdin:
            try:
                if json.loads(line).get("type") == "stop":
                    stop.set()
            except ValueError:
                pass

    threading.Thread(target=read_stdin, daemon=True).start()

    step = newest_step(ckpt_dir)
    held = []
    while step < total and not stop.is_set():
        time.sleep(step_s)
        held.append(b"\x01" * leak)  # written bytes: resident, unlike a fresh calloc'ed buffer
        step += 1
        send({"type": "progress", "step": step, "total_steps": total, "epoch": 0,
              "loss": 1.0 / step, "metrics": {"accuracy": step / total}, "samples_per_sec": 0.0})
    path, digest = save_checkpoint(ckpt_dir, step, keep)
    send({"type": "checkpoint", "path": path, "step": step, "digest": digest})
    send({"type": "done", "step": step, "job_complete": step >= total})
    return EXIT_STOPPED if stop.is_set() and step < total else 0


if __name__ == "__main__":
    sys.exit(main())
