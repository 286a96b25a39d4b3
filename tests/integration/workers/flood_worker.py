"""A command worker that floods stderr, for the log rotation test.

Between its protocol messages it writes `flood_mib` MiB of 1 KiB lines to stderr per step, and
one line of 2 MiB with no newline until its end; then a checkpoint and `done`. Everything comes
from `params` in BATON_JOB_FILE; the checkpoint format and messages are chatty_worker.py's.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chatty_worker import save_checkpoint, send  # noqa: E402


def main():
    job = json.load(open(os.environ["BATON_JOB_FILE"]))
    params = job["params"]
    total = int(params["total_steps"])
    flood = int(float(params["flood_mib"]) * 1024)
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "flood 1.0"})
    line = "x" * 1023 + "\n"
    err = sys.stderr
    for step in range(1, total + 1):
        for i in range(flood):
            err.write(line)
        err.write("y" * (2 << 20) + "\n")
        err.write("flood step %d\n" % step)
        err.flush()
        send({"type": "progress", "step": step, "total_steps": total, "epoch": 0,
              "loss": 1.0 / step, "metrics": {}, "samples_per_sec": 0.0})
    path, digest = save_checkpoint(ckpt_dir, total, 2)
    send({"type": "checkpoint", "path": path, "step": total, "digest": digest})
    send({"type": "done", "step": total, "job_complete": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
