#!/usr/bin/env python3
"""A baton worker in plain Python (standard library only) on the `baton` package.

It trains a tiny logistic-regression model until the shard ends and leaks memory on purpose, the
way Keras does on every fit(), so the supervisor has something to recycle. `baton.Session`
speaks the protocol (hello, progress, checkpoint, done, error; stop lines, SIGTERM and SIGINT;
exit codes 0, 1, 2, 3) and says where to resume from.

Checkpoints: by default a baton checkpoint FILE (`ckpt-<12-digit step>.safetensors`, the format
the Eigen worker writes, digest included), written atomically into $BATON_CHECKPOINT_DIR and
announced with its digest, as protocol v1 always allowed; tests/chaos and tests/integration
read those files. With `"params": {"checkpoint": "folder"}`, or standalone (no BATON_*
environment), it writes the same safetensors bytes as `weights.safetensors` into a folder
checkpoint instead, which baton (or the package, standalone) seals.

The job's `data` (samples, features, seed), `training` (batch_size, epochs,
optimizer.learning_rate), `debug.leak_mib_per_step` and `checkpoints.keep` are read as before;
`params` may give the same keys flat (samples, features, seed, batch_size, epochs,
learning_rate, leak_mib_per_step) for a job without those sections.

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
import time
from pathlib import Path

try:
    import baton
except ImportError:  # from a checkout: the package is in ../../../python
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
    import baton
from baton._xxh64 import xxh64_hex

WEIGHTS = "weights.safetensors"
DIGEST_KEY = b'"digest":"xxh64:'


def encode_checkpoint(tensors, metadata):
    """tensors: list of (name, list of floats), stored as F64 vectors. Returns (bytes, digest)."""
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
    digest = xxh64_hex(bytes(blob))
    at = blob.find(DIGEST_KEY) + len(DIGEST_KEY)
    blob[at:at + 16] = digest.encode()
    return bytes(blob), "xxh64:" + digest


def decode_checkpoint(blob):
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__")
    at = blob.find(DIGEST_KEY) + len(DIGEST_KEY)
    if "xxh64:" + xxh64_hex(blob[:at] + b"0" * 16 + blob[at + 16:]) != meta["digest"]:
        raise ValueError("digest mismatch")
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = list(struct.unpack("<%dd" % ((end - begin) // 8), data[begin:end]))
    return tensors, meta


def write_file_checkpoint(folder, step, blob, keep):
    """Atomically (temp file, fsync, rename, folder fsync), then prune to `keep` files."""
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
    return path


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


def settings(job, params):
    data, training = job.get("data") or {}, job.get("training") or {}
    optimizer = training.get("optimizer") or {}
    return {
        "samples": int(params.get("samples", data.get("samples", 512))),
        "features": int(params.get("features", data.get("features", 8))),
        "seed": int(params.get("seed", data.get("seed", 0))),
        "batch": int(params.get("batch_size", training.get("batch_size", 32))),
        "epochs": int(params.get("epochs", training.get("epochs", 6))),
        "lr": float(params.get("learning_rate", optimizer.get("learning_rate", 0.5))),
        "leak_mib": float(params.get("leak_mib_per_step",
                                     (job.get("debug") or {}).get("leak_mib_per_step", 0.0))),
        "keep": int((job.get("checkpoints") or {}).get("keep", 2)),
        "folder": params.get("checkpoint", "file") == "folder",
    }


def main():
    with baton.Session("python-example") as session:
        cfg = settings(session.job, session.params)
        samples, features, batch = cfg["samples"], cfg["features"], cfg["batch"]
        if min(samples, features, batch, cfg["epochs"]) < 1:
            raise baton.ConfigError("samples, features, batch_size and epochs must be positive")
        steps_per_epoch = -(-samples // batch)
        session.steps_per_epoch = steps_per_epoch
        session.total_steps = total_steps = steps_per_epoch * cfg["epochs"]
        folder_mode = cfg["folder"] or not session.under_baton
        spike_dir = os.environ.get("BATON_EXAMPLE_SPIKE_DIR")
        spike_file = os.path.join(spike_dir, str(os.getpid())) if spike_dir else None

        rng = random.Random(cfg["seed"])
        xs = [[rng.gauss(0.0, 1.0) for _ in range(features)] for _ in range(samples)]
        ys = [1.0 if sum(row) > 0 else 0.0 for row in xs]

        w, b, step = [0.0] * features, [0.0], 0
        if session.restore_path is not None:  # verified by baton (or the package) already
            path = session.restore_path
            blob = (path / WEIGHTS if path.is_dir() else path).read_bytes()
            tensors, meta = decode_checkpoint(blob)
            w, b, step = tensors["layers.0.kernel"], tensors["layers.0.bias"], int(meta["step"])
        leaked = []

        while not session.should_stop():
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
            w = [wi - cfg["lr"] * g / n for wi, g in zip(w, gw)]
            b = [b[0] - cfg["lr"] * gb / n]
            step += 1
            # A real training step takes milliseconds to seconds; this one is microseconds of
            # arithmetic. Pausing keeps the example's timeline realistic next to the
            # supervisor's memory sampling (memory.poll_ms), so its soft limit lands mid-shard.
            time.sleep(0.004)
            if cfg["leak_mib"] > 0:  # the leak, touched so resident memory really grows
                leaked.append(bytearray(b"\x01" * int(cfg["leak_mib"] * 1024 * 1024)))
            spike_mib = take_spike(spike_file) if spike_file else 0.0
            if spike_mib > 0:  # written as it is allocated: resident at once, like the leak
                leaked.append(bytearray(b"\x01") * int(spike_mib * 1024 * 1024))
            session.report(step, loss=loss / n)

        blob, digest = encode_checkpoint(
            [("layers.0.kernel", w), ("layers.0.bias", b)],
            {"job": str(session.job.get("name", "python-example")), "step": str(step),
             "epoch": str(step // steps_per_epoch)})
        if folder_mode:
            with session.checkpoint(step) as folder:
                (folder / WEIGHTS).write_bytes(blob)
        elif session.restore_path is None or step != session.restored_step:
            path = write_file_checkpoint(os.environ["BATON_CHECKPOINT_DIR"], step, blob,
                                         cfg["keep"])
            session.announce_file(path, step, digest)
        else:  # stopped before the first step: re-announce the file it resumed from
            meta = decode_checkpoint(session.restore_path.read_bytes())[1]
            session.announce_file(session.restore_path, step, meta["digest"])


if __name__ == "__main__":
    main()
