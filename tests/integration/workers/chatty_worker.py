"""A command worker for the integration tests that is as chatty on stdout as a real trainer.

It draws '\r' progress bars (one with no newline right before hello, Keras-style bars before
progress lines), print()s plain text, some with braces that are not JSON, and writes baton
checkpoint files (one F64 tensor: the step) as configs/examples/python-worker/train.py does.
Its job has no data, model or training section: everything comes from `params` in
BATON_JOB_FILE, and it reports the job's total steps itself.
"""
import json
import os
import struct
import sys
import threading

import xxhash

EXIT_STOPPED = 3


def out(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def send(msg, before=""):
    # `before` lands on the same stdout line as the message, as a bar without a newline does.
    out(before + json.dumps(msg) + "\n")


def bar(done, total, width=20):
    filled = width * done // max(total, 1)
    return "[" + "=" * filled + ">" + "." * (width - filled) + "] %3d%%" % (100 * done // max(total, 1))


def encode_checkpoint(step, value):
    meta = {"digest": "xxh64:" + "0" * 16, "format": "baton-checkpoint", "format_version": "1",
            "step": str(step)}
    raw = struct.pack("<d", value)
    header = {"__metadata__": meta,
              "state": {"dtype": "F64", "shape": [1], "data_offsets": [0, len(raw)]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    blob = bytearray(struct.pack("<Q", len(text)) + text + raw)
    digest = xxhash.xxh64(bytes(blob), seed=0).hexdigest()
    at = blob.find(b'"digest":"xxh64:') + len(b'"digest":"xxh64:')
    blob[at:at + 16] = digest.encode()
    return bytes(blob), "xxh64:" + digest


def newest_step(folder):
    names = sorted(n for n in os.listdir(folder)
                   if n.startswith("ckpt-") and n.endswith(".safetensors"))
    for name in reversed(names):
        with open(os.path.join(folder, name), "rb") as f:
            blob = f.read()
        (n,) = struct.unpack_from("<Q", blob, 0)
        return int(json.loads(blob[8:8 + n])["__metadata__"]["step"])
    return 0


def save_checkpoint(folder, step, keep):
    blob, digest = encode_checkpoint(step, float(step))
    path = os.path.join(folder, "ckpt-%012d.safetensors" % step)
    tmp = path + ".tmp-%d" % os.getpid()
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


def main():
    job = json.load(open(os.environ["BATON_JOB_FILE"]))
    params = job["params"]
    total = int(params["total_steps"])
    steps_per_epoch = int(params["steps_per_epoch"])
    ckpt_dir = os.environ["BATON_CHECKPOINT_DIR"]
    if "BATON_SHARD_STEPS" in os.environ:
        shard = int(os.environ["BATON_SHARD_STEPS"])
    else:
        shard = int(os.environ["BATON_SHARD_EPOCHS"]) * steps_per_epoch

    for i in range(4):
        out("loading dataset %s %s\r" % (params["dataset"], bar(i, 3)))
    # The last redraw has no line end: hello shares its line.
    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "chatty 1.0"},
         before="loading dataset %s %s " % (params["dataset"], bar(3, 3)))
    print("chatty worker: params", json.dumps(params, sort_keys=True))
    print("config {'lr': %s} (a brace that is not JSON)" % params["lr"])

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
    end = min(total, (step // shard + 1) * shard)
    if os.environ.get("BATON_MAX_STEPS"):
        end = min(end, step + int(os.environ["BATON_MAX_STEPS"]))
    print("resuming at step %d, shard ends at %d" % (step, end))
    keep = job.get("checkpoints", {}).get("keep", 2)

    def checkpoint():
        path, digest = save_checkpoint(ckpt_dir, step, keep)
        send({"type": "checkpoint", "path": path, "step": step, "digest": digest},
             before="saving %s\r" % bar(1, 1))

    while step < end and not stop.is_set():
        k = step % steps_per_epoch
        if k == 0:
            print("Epoch %d/%d" % (step // steps_per_epoch + 1, total // steps_per_epoch))
        step += 1
        keras = "%d/%d %s - ETA: 0s - loss: %.4f" % (k + 1, steps_per_epoch,
                                                     bar(k + 1, steps_per_epoch), 1.0 / step)
        for i in range(3):
            out("epoch %d %s\r" % (step // steps_per_epoch + 1, bar(i, 3)))
        progress = {"type": "progress", "step": step, "total_steps": total,
                    "epoch": (step - 1) // steps_per_epoch, "loss": 1.0 / step, "metrics": {},
                    "samples_per_sec": 0.0}
        # Alternate: a message right after a bar on the same line, or after the bar's '\r'.
        send(progress, before=keras if step % 2 else keras + "\r")
    checkpoint()
    print("shard done at step %d" % step)
    send({"type": "done", "step": step, "job_complete": step >= total}, before=bar(1, 1) + "\r")
    return EXIT_STOPPED if stop.is_set() and step < total else 0


if __name__ == "__main__":
    sys.exit(main())
