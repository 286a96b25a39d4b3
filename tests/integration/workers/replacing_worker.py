"""Runs the built-in worker and, in the first shard, damages its checkpoint behind its back.

  replacing_worker.py BATON_WORKER_EXE

Forwards the worker's protocol lines unchanged. After the first shard's `checkpoint` line it
waits a second (the supervisor verifies the file meanwhile), then replaces the file under the
same name with a copy that has one bit flipped (a new file, renamed over it), and only then
forwards the rest (`done`) and exits with the worker's code. The supervisor must still catch
the damage before it resumes anyone from that file (tests/integration/run_builtin_worker_test.cpp).
"""
import json
import os
import subprocess
import sys
import time


def main():
    first = os.environ.get("BATON_SHARD_INDEX") == "0"
    child = subprocess.Popen([sys.argv[1]], stdout=subprocess.PIPE, text=True)
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if not first:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("type") != "checkpoint":
            continue
        time.sleep(1.0)
        path = message["path"]
        with open(path, "rb") as f:
            data = bytearray(f.read())
        data[-1] ^= 0x01
        with open(path + ".replacement", "wb") as f:
            f.write(data)
        os.replace(path + ".replacement", path)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
