"""A command worker for the system-mode tests: it reports who it runs as, from the worker itself.

It writes {"uid", "euid", "gid", "egid", "groups", "env"} to identity.json in BATON_JOB_DIR (env:
the USER, LOGNAME, HOME, SHELL and PATH it was given, and the program it runs as), then runs
params.total_steps steps with one checkpoint at the end, as chatty_worker.py does. With
params.hostile (a file and a folder only root may touch) its first run tries to get at them:
setuid(0), a direct open, and links planted where the daemon (root) later appends, writes and
removes: worker.log and history.jsonl point at the file, its staging folder at the folder; what
each try gave is in identity.json under "hostile". That run then crashes (the job fails); the
run after a resume completes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chatty_worker import save_checkpoint  # noqa: E402


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def plant(link, target):
    tmp = link + ".planted"
    os.symlink(target, tmp)
    os.replace(tmp, link)


def attack(job_dir, hostile):
    tried = {}
    try:
        os.setuid(0)
        tried["setuid0"] = "became root"
    except PermissionError:
        tried["setuid0"] = "refused"
    try:
        with open(hostile["file"], "a") as f:
            f.write("owned\n")
        tried["open"] = "opened"
    except PermissionError:
        tried["open"] = "refused"
    plant(os.path.join(job_dir, "worker.log"), hostile["file"])
    plant(os.path.join(job_dir, "history.jsonl"), hostile["file"])
    staging = os.environ["BATON_STAGING_DIR"]
    os.rmdir(staging)
    os.symlink(hostile["folder"], staging)
    tried["planted"] = True
    return tried


def main():
    job = json.load(open(os.environ["BATON_JOB_FILE"]))
    params = job["params"]
    job_dir = os.environ["BATON_JOB_DIR"]
    send({"type": "hello", "protocol": 1, "pid": os.getpid(), "worker": "identity 1.0"})
    me = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid(),
          "groups": sorted(os.getgroups()),
          "env": {k: os.environ.get(k) for k in ("USER", "LOGNAME", "HOME", "SHELL", "PATH")},
          "executable": sys.executable}
    marker = os.path.join(job_dir, "planted")
    if "hostile" in params and not os.path.exists(marker):
        me["hostile"] = attack(job_dir, params["hostile"])
        with open(os.path.join(job_dir, "identity.json"), "w") as f:
            json.dump(me, f)
        open(marker, "w").close()
        # Crash, so the job fails and rests: a `baton resume` then makes the daemon open its
        # log and history afresh, where the links now are.
        print("planted; crashing", file=sys.stderr, flush=True)
        return 1
    if "hostile" not in params:
        with open(os.path.join(job_dir, "identity.json"), "w") as f:
            json.dump(me, f)
    # Lines the daemon appends to worker.log, which may be a link by now.
    for i in range(3):
        print("worker stderr line %d" % i, file=sys.stderr, flush=True)
    total = int(params["total_steps"])
    for step in range(1, total + 1):
        send({"type": "progress", "step": step, "total_steps": total, "epoch": 0,
              "loss": 1.0 / step, "metrics": {}, "samples_per_sec": 0.0})
    path, digest = save_checkpoint(os.environ["BATON_CHECKPOINT_DIR"], total, 2)
    send({"type": "checkpoint", "path": path, "step": total, "digest": digest})
    send({"type": "done", "step": total, "job_complete": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
