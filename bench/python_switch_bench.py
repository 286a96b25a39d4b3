#!/usr/bin/env python3
"""The shard switch of a PyTorch worker under `baton run`, with and without worker.preload.

Runs the PyTorch example (configs/examples/pytorch/train.py, the seed model: Linear 100-2000-
2000-1, Adam, batch 32) as whole `baton run` processes: each variant once in K shards and once in
one shard, the four runs of a round in alternating order, and prints for each variant the median
cost of one switch, (T_K - T_1) / (K - 1) paired within each round: the old worker's save and exit, the supervisor's verify
and spawn, and the new worker's start-up (imports, data, model, restore) to its first step. With
`preload` the new worker is forked from a server that imported torch once. Also prints the
supervisor's part alone (from one shard's end to the next spawn, from the job's log) and the CPU.

    /usr/bin/python3 bench/python_switch_bench.py --baton build/supervisor/baton [--rounds 3]
        [--shards 4] [--units 2000] [--quick]
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch


def cpu_model():
    """The CPU's name and widest vector ISA ("AMD EPYC, avx2"): run times differ by both."""
    name, isa = platform.processor() or "unknown", ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not isa:
                flags = line.split(":", 1)[1].split()
                isa = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "")
    except OSError:
        pass
    return name + (", " + isa if isa else "")


def job(name, steps_per_shard, preload, params):
    worker = {"command": [PYTHON, str(ROOT / "configs/examples/pytorch/train.py")],
              "env": {"PYTHONPATH": str(ROOT / "python")}}
    if preload:
        worker["preload"] = ["torch", "baton.torch"]  # what train.py imports
    return {"name": name, "params": params, "shard": {"steps": steps_per_shard},
            "memory": {"poll_ms": 100}, "worker": worker}


_STAMP = re.compile(r"^(\S+Z) \[baton\] worker \d+ (started at step|ended: )")


def supervisor_gaps_ms(log_path):
    """From each shard's end to the next spawn, as the job's log stamps them."""
    gaps, ended = [], None
    for line in open(log_path, encoding="utf-8", errors="replace"):
        m = _STAMP.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
        if m.group(2).startswith("ended"):
            ended = t
        elif ended is not None:
            gaps.append((t - ended) * 1e3)
            ended = None
    return gaps


def run(baton, work, spec):
    """One whole `baton run`: its wall seconds and the job's supervisor gaps."""
    path = work / (spec["name"] + ".json")
    path.write_text(json.dumps(spec))
    state = work / ("state-" + spec["name"])
    shutil.rmtree(state, ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run([baton, "run", str(path), "--state-dir", str(state), "--json"],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit("python_switch_bench: %s failed (exit %d):\n%s\n%s" %
                 (spec["name"], r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    summary = json.loads(r.stdout)
    if summary["state"] != "completed":
        sys.exit("python_switch_bench: %s ended %s" % (spec["name"], summary["state"]))
    gaps = supervisor_gaps_ms(state / "jobs" / summary["id"] / "worker.log")
    shutil.rmtree(state, ignore_errors=True)
    return wall, len(summary["shards"]), gaps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--baton", required=True, help="the baton executable")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shards", type=int, default=4, help="K: shards of the split runs")
    p.add_argument("--units", type=int, default=2000,
                   help="hidden width (the seed's 2000; a small one isolates the start-up from "
                        "the checkpoint's size and makes steps fast enough for a precise median)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small model, one round")
    a = p.parse_args()
    params = {"epochs": 2, "samples": 1024, "features": 100, "units": a.units, "threads": 1,
              "leak": False}
    if a.quick:
        a.rounds, a.shards = 1, 2
        params.update(epochs=1, samples=256, units=64)
    total_steps = params["epochs"] * params["samples"] // 32
    if total_steps % a.shards:
        sys.exit("python_switch_bench: %d steps do not split into %d shards" %
                 (total_steps, a.shards))
    print("cpu: %s (%d cores), python %s; %d steps of width %d, %d-shard runs against 1-shard "
          "runs, %d rounds" % (cpu_model(), os.cpu_count(), platform.python_version(),
                               total_steps, params["units"], a.shards, a.rounds), flush=True)
    variants = {"fresh": False, "preload": True}
    walls = {(v, k): [] for v in variants for k in (1, a.shards)}
    gaps = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="baton-switch-bench-") as tmp:
        work = Path(tmp)
        for r in range(a.rounds):
            order = [(v, k) for v in variants for k in (1, a.shards)]
            if r % 2:
                order.reverse()  # neither variant always runs first (a warm page cache)
            for v, k in order:
                steps = total_steps // k
                wall, shards, g = run(a.baton, work, job("%s-%d" % (v, k), steps, variants[v],
                                                         params))
                if shards != k:
                    sys.exit("python_switch_bench: %s-%d ran %d shards" % (v, k, shards))
                walls[(v, k)].append(wall)
                gaps[v].extend(g)
                print("  round %d: %-7s %d shard(s): %.2f s" % (r + 1, v, k, wall), flush=True)
    switch = {}
    for v in variants:
        one, split = statistics.median(walls[(v, 1)]), statistics.median(walls[(v, a.shards)])
        # Paired within a round: the machine's speed drifts between rounds by more than a
        # switch costs, so each round's own difference, then their median.
        per_round = [(k - o) / (a.shards - 1) for o, k in zip(walls[(v, 1)], walls[(v, a.shards)])]
        switch[v] = statistics.median(per_round)
        print("%-7s: 1 shard %.2f s, %d shards %.2f s (medians); per switch %.0f ms (median of "
              "rounds: %s); supervisor's part %.0f ms (median of %d)" %
              (v, one, a.shards, split, switch[v] * 1e3,
               ", ".join("%.0f" % (x * 1e3) for x in per_round), statistics.median(gaps[v]),
               len(gaps[v])))
    print("ratio: a switch with preload costs %.2f of one without (goal: under 100 ms with it)" %
          (switch["preload"] / switch["fresh"] if switch["fresh"] > 0 else float("nan")))


if __name__ == "__main__":
    main()
