"""A command worker that attacks the supervisor (tests/integration/hostile_worker_test.cpp).

Speaks protocol v1 by hand with the standard library only. In the shards a test aims at (all of
them, or only the first with --first-only) it makes one attack; otherwise it trains honestly:
one step per progress line, a folder checkpoint (written into $BATON_STAGING_DIR, announced
without a digest, sealed by the supervisor) at every shard end, resuming from $BATON_RESUME_FROM.

  hostile_worker.py --attack MODE --total N [--first-only] [--trace FILE]

Attacks on the checkpoint the supervisor reads (announced as a baton checkpoint file, digest
included, in $BATON_CHECKPOINT_DIR):
  fifo         a FIFO named like a checkpoint (a blocking open would hang the daemon)
  dev-zero     a symlink to /dev/zero (an unbounded read would exhaust the daemon's memory)
  sparse       a 1.5 GiB sparse file (a read into memory would bloat the daemon)
  symlink-out  a symlink to a file outside the state dir
Attacks on the outcome:
  fake-done    `done` with job_complete true and no checkpoint at all, exit 0
  bad-step     a checkpoint line whose step is a string ("40"), then done, exit 0
  empty-shard  `done` without any progress, exit 0, every time
  exit-2       an `error` line naming the bad data, exit 2
  enospc       fill the disk while writing the checkpoint; report the OSError in an `error`
               line and exit 1 (on a small tmpfs this is a real ENOSPC)
  enospc-line  the same `error` line with no disk behind it (when no tmpfs can be mounted)
  honest       no attack
"""
import argparse
import json
import os
import sys
import time

FAKE_DIGEST = "xxh64:0123456789abcdef"


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def checkpoint_name(step):
    return "ckpt-%012d.safetensors" % step


def write_folder(staging, step, extra_bytes=0):
    folder = os.path.join(staging, "step-%d" % step)
    os.makedirs(folder)
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"step": step}, f)
    if extra_bytes:
        with open(os.path.join(folder, "weights.bin"), "wb") as f:
            chunk = b"\x01" * (1 << 20)
            for _ in range(extra_bytes >> 20):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    return folder


def attack_file(mode, ckpt_dir, outside_dir, step):
    """Puts the hostile entry where a checkpoint file would be; returns its path."""
    path = os.path.join(ckpt_dir, checkpoint_name(step))
    if mode == "fifo":
        os.mkfifo(path)
    elif mode == "dev-zero":
        os.symlink("/dev/zero", path)
    elif mode == "sparse":
        with open(path, "wb") as f:
            f.truncate(3 << 29)  # 1.5 GiB of hole
    elif mode == "symlink-out":
        os.makedirs(outside_dir, exist_ok=True)
        target = os.path.join(outside_dir, "stolen.safetensors")
        with open(target, "wb") as f:
            f.write(b"\x00" * 64)
        os.symlink(target, path)
    else:
        raise SystemExit("unknown file attack " + mode)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attack", required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--first-only", action="store_true")
    ap.add_argument("--trace")
    a = ap.parse_args()

    shard = int(os.environ["BATON_SHARD_INDEX"])
    staging = os.environ["BATON_STAGING_DIR"]
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    job_dir = os.environ["BATON_JOB_DIR"]
    resume = os.environ.get("BATON_RESUME_FROM")
    step = 0
    if resume is not None:
        with open(os.path.join(resume, "state.json")) as f:
            step = json.load(f)["step"]
    if a.trace:
        with open(a.trace, "a") as t:
            t.write(json.dumps({"shard": shard, "resume_from": resume, "step": step}) + "\n")
    mode = a.attack if (shard == 0 or not a.first_only) else "honest"

    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "hostile_worker"})
    if mode == "empty-shard":
        send({"type": "done", "step": step, "job_complete": False})
        return 0
    if mode == "fake-done":
        send({"type": "done", "step": a.total, "job_complete": True})
        return 0
    if mode == "exit-2":
        send({"type": "error", "message": "bad data: column 3 of train.csv is not a number"})
        sys.stderr.write("hostile_worker: giving up\n")
        return 2

    budget = int(os.environ.get("BATON_SHARD_STEPS", a.total))
    end = min(a.total, step + budget)
    while step < end:
        step += 1
        send({"type": "progress", "step": step, "total_steps": a.total, "epoch": 0,
              "loss": 1.0 / step, "samples_per_sec": 100.0})
        time.sleep(0.01)

    if mode in ("fifo", "dev-zero", "sparse", "symlink-out"):
        outside = os.path.join(os.path.dirname(os.path.dirname(job_dir)), "..", "outside")
        path = attack_file(mode, ckpt_dir, os.path.normpath(outside), step)
        send({"type": "checkpoint", "path": path, "step": step, "digest": FAKE_DIGEST})
        time.sleep(60)  # the supervisor kills this worker
        return 3
    if mode == "bad-step":
        folder = write_folder(staging, step)
        sys.stdout.write('{"type":"checkpoint","path":%s,"step":"%d"}\n' % (json.dumps(folder), step))
        sys.stdout.flush()
        send({"type": "done", "step": step, "job_complete": step >= a.total})
        return 0
    if mode in ("enospc", "enospc-line"):
        try:
            if mode == "enospc-line":
                raise OSError(28, "No space left on device", os.path.join(staging, "weights.bin"))
            write_folder(staging, step, extra_bytes=64 << 20)
        except OSError as e:
            send({"type": "error", "message": "cannot write the checkpoint: %s" % e})
            return 1
        raise SystemExit("the disk did not fill up: is the state dir a small tmpfs?")

    folder = write_folder(staging, step)
    send({"type": "checkpoint", "path": folder, "step": step})
    send({"type": "done", "step": step, "job_complete": step >= a.total})
    return 0


if __name__ == "__main__":
    sys.exit(main())
