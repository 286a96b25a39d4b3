#!/usr/bin/env python3
"""A baton worker written in plain Python (standard library only).

It shows that any trainer can run under baton: it speaks the worker protocol on stdout (JSON
lines, hello first), resumes from the newest checkpoint in $BATON_CHECKPOINT_DIR, trains a tiny
logistic-regression model until the shard ends, writes a baton checkpoint (safetensors with an
xxh64 digest, the same format the Eigen worker writes) and exits. It leaks memory on purpose, the
way Keras does on every fit(), so the supervisor has something to recycle.

Environment (set by the supervisor, see protocol/README.md):
  BATON_JOB_FILE, BATON_CHECKPOINT_DIR, BATON_SHARD_STEPS or BATON_SHARD_EPOCHS,
  BATON_PROTOCOL_VERSION
Exit codes: 0 shard or job done, 3 stopped on request after a checkpoint, 1 error.

Test hook (README.md): with BATON_EXAMPLE_SPIKE_DIR set, a file in that folder named after this
process's pid and holding a number N makes the next step allocate N MiB more and keep it, a
sudden jump in memory ordered from outside (the chaos driver, tests/chaos/, uses it).
"""
import json
import math
import os
import random
import struct
import sys
import threading
import time

PROTOCOL_VERSION = 1
EXIT_STOPPED = 3
MASK64 = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK64


def xxh64(data, seed=0):
    """xxHash64 (Yann Collet's specification), pure Python: small checkpoints only."""
    n = len(data)
    i = 0

    def rnd(acc, lane):
        acc = (acc + lane * P2) & MASK64
        return (rotl(acc, 31) * P1) & MASK64

    if n >= 32:
        v = [(seed + P1 + P2) & MASK64, (seed + P2) & MASK64, seed, (seed - P1) & MASK64]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [rnd(a, b) for a, b in zip(v, lanes)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK64
        for a in v:
            h ^= rnd(0, a)
            h = (h * P1 + P4) & MASK64
    else:
        h = (seed + P5) & MASK64
    h = (h + n) & MASK64
    while i + 8 <= n:
        h ^= rnd(0, struct.unpack_from("<Q", data, i)[0])
        h = (rotl(h, 27) * P1 + P4) & MASK64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & MASK64
        h = (rotl(h, 23) * P2 + P3) & MASK64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & MASK64
        h = (rotl(h, 11) * P1) & MASK64
        i += 1
    h ^= h >> 33
    h = (h * P2) & MASK64
    h ^= h >> 29
    h = (h * P3) & MASK64
    h ^= h >> 32
    return h


def encode_checkpoint(tensors, metadata):
    """tensors: list of (name, list of floats); stored as F64 vectors."""
    meta = dict(metadata)
    meta["format"] = "baton-checkpoint"
    meta["format_version"] = "1"
    meta["digest"] = "xxh64:" + "0" * 16
    header = {"__metadata__": meta}
    data = b""
    for name, values in tensors:
        raw = struct.pack("<%dd" % len(values), *values)
        header[name] = {"dtype": "F64", "shape": [len(values)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    blob = bytearray(struct.pack("<Q", len(text)) + text + data)
    digest = "%016x" % xxh64(bytes(blob))
    at = blob.find(b'"digest":"xxh64:') + len(b'"digest":"xxh64:')
    blob[at:at + 16] = digest.encode()
    return bytes(blob), "xxh64:" + digest


def decode_checkpoint(blob):
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__")
    stored = meta["digest"]
    at = blob.find(b'"digest":"xxh64:') + len(b'"digest":"xxh64:')
    zeroed = blob[:at] + b"0" * 16 + blob[at + 16:]
    if "xxh64:%016x" % xxh64(zeroed) != stored:
        raise ValueError("digest mismatch")
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = list(struct.unpack("<%dd" % ((end - begin) // 8), data[begin:end]))
    return tensors, meta


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def newest_checkpoint(folder):
    names = sorted(n for n in os.listdir(folder)
                   if n.startswith("ckpt-") and n.endswith(".safetensors"))
    for name in reversed(names):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                return decode_checkpoint(f.read())
        except (OSError, ValueError, KeyError, struct.error) as e:
            print("skipping %s: %s" % (path, e), file=sys.stderr)
    return None


def save_checkpoint(folder, step, tensors, meta, keep):
    blob, digest = encode_checkpoint(tensors, meta)
    path = os.path.join(folder, "ckpt-%012d.safetensors" % step)
    tmp = path + ".tmp-py%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    old = sorted(n for n in os.listdir(folder)
                 if n.startswith("ckpt-") and n.endswith(".safetensors"))
    for name in old[:-keep]:
        os.remove(os.path.join(folder, name))
    return path, digest


def take_spike(path):
    """The test hook: MiB to allocate now if `path` names some, else 0. Removing the file claims
    it, so a spike the sender withdrew in the meantime (by removing it first) never happens."""
    try:
        with open(path) as f:
            text = f.read()
        os.remove(path)
    except FileNotFoundError:
        return 0.0
    try:
        mib = float(text)
    except ValueError:
        print("ignoring spike file %s: %r is not a number of MiB" % (path, text), file=sys.stderr)
        return 0.0
    print("test hook: memory spike of %g MiB" % mib, file=sys.stderr)
    return mib


def main():
    job = json.load(open(os.environ["BATON_JOB_FILE"]))
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    training = job["training"]
    data = job["data"]
    samples, features = data["samples"], data["features"]
    batch = training["batch_size"]
    steps_per_epoch = -(-samples // batch)
    total_steps = steps_per_epoch * training["epochs"]
    # The shard length comes in steps or in epochs, whichever the job's `shard` names.
    if "BATON_SHARD_STEPS" in os.environ:
        shard_steps = int(os.environ["BATON_SHARD_STEPS"])
    else:
        shard_steps = int(os.environ["BATON_SHARD_EPOCHS"]) * steps_per_epoch
    lr = training["optimizer"]["learning_rate"]
    leak_mib = float(job.get("debug", {}).get("leak_mib_per_step", 0.0))
    spike_dir = os.environ.get("BATON_EXAMPLE_SPIKE_DIR")
    spike_file = os.path.join(spike_dir, str(os.getpid())) if spike_dir else None

    send({"type": "hello", "protocol": PROTOCOL_VERSION, "pid": os.getpid(),
          "worker": "python-example 1.0"})
    stop = threading.Event()

    def read_stdin():
        for line in sys.stdin:
            try:
                if json.loads(line).get("type") == "stop":
                    stop.set()
            except ValueError:
                pass

    threading.Thread(target=read_stdin, daemon=True).start()

    rng = random.Random(data.get("seed", 0))
    xs = [[rng.gauss(0.0, 1.0) for _ in range(features)] for _ in range(samples)]
    ys = [1.0 if sum(row) > 0 else 0.0 for row in xs]

    w, b, step = [0.0] * features, [0.0], 0
    found = newest_checkpoint(ckpt_dir)
    if found:
        tensors, meta = found
        w, b, step = tensors["layers.0.kernel"], tensors["layers.0.bias"], int(meta["step"])
    end = min(total_steps, (step // shard_steps + 1) * shard_steps)
    if os.environ.get("BATON_MAX_STEPS"):  # the supervisor's learned memory budget
        end = min(end, step + int(os.environ["BATON_MAX_STEPS"]))
    leaked = []

    def checkpoint():
        path, digest = save_checkpoint(
            ckpt_dir, step, [("layers.0.kernel", w), ("layers.0.bias", b)],
            {"job": job["name"], "step": str(step), "epoch": str(step // steps_per_epoch)},
            job.get("checkpoints", {}).get("keep", 2))
        send({"type": "checkpoint", "path": path, "step": step, "digest": digest})

    while step < end:
        if stop.is_set():
            checkpoint()
            return EXIT_STOPPED
        k = step % steps_per_epoch
        rows = range(k * batch, min(samples, (k + 1) * batch))
        gw, gb, loss = [0.0] * features, 0.0, 0.0
        for r in rows:
            z = sum(wi * xi for wi, xi in zip(w, xs[r])) + b[0]
            p = 1.0 / (1.0 + math.exp(-z))
            loss -= math.log(max(p, 1e-7)) if ys[r] else math.log(max(1.0 - p, 1e-7))
            err = p - ys[r]
            gw = [g + err * xi for g, xi in zip(gw, xs[r])]
            gb += err
        n = len(rows)
        w = [wi - lr * g / n for wi, g in zip(w, gw)]
        b = [b[0] - lr * gb / n]
        step += 1
        # A real training step takes milliseconds to seconds; this one is microseconds of
        # arithmetic. Pausing keeps the example's timeline realistic next to the supervisor's
        # memory sampling (memory.poll_ms), so its soft limit lands mid-shard as it would.
        time.sleep(0.004)
        if leak_mib > 0:  # the leak, touched so resident memory really grows
            leaked.append(bytearray(b"\x01" * int(leak_mib * 1024 * 1024)))
        spike_mib = take_spike(spike_file) if spike_file else 0.0
        if spike_mib > 0:  # written as it is allocated: resident at once, like the leak
            leaked.append(bytearray(b"\x01") * int(spike_mib * 1024 * 1024))
        send({"type": "progress", "step": step, "total_steps": total_steps,
              "epoch": (step - 1) // steps_per_epoch, "loss": loss / n, "metrics": {},
              "samples_per_sec": 0.0})
    checkpoint()
    send({"type": "done", "step": step, "job_complete": step >= total_steps})
    return 0


if __name__ == "__main__":
    sys.exit(main())
