"""A command worker that checkpoints as folders (tests/integration/folder_checkpoint_test.cpp).

Speaks protocol v1 by hand with the standard library only. Each checkpoint is a folder written
into $BATON_STAGING_DIR and announced without a digest; the supervisor seals it. The worker
resumes only from $BATON_RESUME_FROM and never scans the checkpoint folder.

  folder_worker.py --total N --every K --trace FILE [--bad MODE]

--damage-last, in the first shard only: after its last checkpoint was sealed, delete a file of
the sealed folder, so the next spawn must skip it.
--bad MODE, in the first shard only, after one good checkpoint: announce a bad one (outside,
symlink, backwards, inner-symlink, inner-fifo, forged, file) and wait to be killed.
"""
import argparse
import json
import os
import sys
import time


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def write_folder(staging, name, step):
    folder = os.path.join(staging, name)
    os.makedirs(os.path.join(folder, "sub"))
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"step": step}, f)
    with open(os.path.join(folder, "sub", "weights.bin"), "wb") as f:
        f.write(bytes(range(256)) * (step + 1))
    return folder


def bad_announcement(mode, staging, ckpt_dir, step):
    if mode == "outside":
        folder = write_folder(os.path.dirname(ckpt_dir), "outside-%d" % step, step)
    elif mode == "symlink":
        real = write_folder(os.path.dirname(ckpt_dir), "real-%d" % step, step)
        folder = os.path.join(staging, "link")
        os.symlink(real, folder)
    elif mode == "backwards":
        folder = write_folder(staging, "step-back", step)
        step = 1
    elif mode == "inner-symlink":
        folder = write_folder(staging, "step-%d" % step, step)
        os.symlink("/etc/hostname", os.path.join(folder, "sub", "escape"))
    elif mode == "inner-fifo":
        folder = write_folder(staging, "step-%d" % step, step)
        os.mkfifo(os.path.join(folder, "sub", "pipe"))
    elif mode == "forged":
        folder = write_folder(staging, "step-%d" % step, step)
        with open(os.path.join(folder, "baton-manifest.json"), "w") as f:
            f.write('{"digest":"xxh64:0000000000000000","files":[]}')
    elif mode == "file":
        folder = os.path.join(staging, "plain")
        with open(folder, "w") as f:
            f.write("not a folder")
    else:
        raise SystemExit("unknown --bad mode " + mode)
    send({"type": "checkpoint", "path": folder, "step": step})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--every", type=int, required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--bad")
    ap.add_argument("--damage-last", action="store_true")
    a = ap.parse_args()

    shard = int(os.environ["BATON_SHARD_INDEX"])
    staging = os.environ["BATON_STAGING_DIR"]
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    resume = os.environ.get("BATON_RESUME_FROM")
    step = 0
    if resume is not None:
        with open(os.path.join(resume, "state.json")) as f:
            step = json.load(f)["step"]
    with open(a.trace, "a") as t:
        t.write(json.dumps({"shard": shard, "resume_from": resume, "step": step,
                            "staging": staging,
                            "staging_empty": os.listdir(staging) == []}) + "\n")

    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "folder_worker"})
    budget = int(os.environ.get("BATON_SHARD_STEPS", a.total))
    end = min(a.total, step + budget)
    checkpoints = 0
    while step < end:
        step += 1
        send({"type": "progress", "step": step, "total_steps": a.total, "epoch": 0,
              "loss": 1.0 / step, "samples_per_sec": 100.0})
        if step % a.every == 0 or step == end:
            folder = write_folder(staging, "step-%d" % step, step)
            send({"type": "checkpoint", "path": folder, "step": step})
            checkpoints += 1
            if a.bad and shard == 0 and checkpoints == 1:
                bad_announcement(a.bad, staging, ckpt_dir, step + 1)
                time.sleep(60)  # the supervisor kills this worker
                return 3
    if a.damage_last and shard == 0:
        sealed = os.path.join(ckpt_dir, "ckpt-%012d" % step)
        for _ in range(200):  # the supervisor seals before it reads the next line; wait for it
            if os.path.exists(os.path.join(sealed, "baton-manifest.json")):
                break
            time.sleep(0.02)
        os.remove(os.path.join(sealed, "state.json"))
    send({"type": "done", "step": step, "job_complete": step >= a.total})
    return 0


if __name__ == "__main__":
    sys.exit(main())
