#!/usr/bin/env python3
"""Per-step cost of baton.Session (report + should_stop) against a seed-size PyTorch step.

Prints the median microseconds of one `report(step, loss=...)` + `should_stop()` pair (under a
fake supervisor: protocol lines really written, to /dev/null, throttled as in production), the
median milliseconds of one seed training step (Linear 100-2000-2000-1, batch 32, Adam, BCE; torch
from Debian's python3-torch), their ratio (the target is far under 1%), and the CPU model.

    /usr/bin/python3 bench/python_session_bench.py [--threads N] [--steps 30] [--calls 200000]
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def session_cost(calls, out):
    tmp = tempfile.mkdtemp()
    os.environ.update(BATON_PROTOCOL_VERSION="1", BATON_STAGING_DIR=tmp,
                      BATON_SHARD_STEPS=str(10 * calls))
    import baton
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the protocol channel (a dup of fd 1) goes to /dev/null
    samples = []
    try:
        with baton.Session("bench", total_steps=10 * calls) as s:
            loss = 0.25
            for rep in range(5):
                t = time.perf_counter()
                for step in range(rep * calls + 1, (rep + 1) * calls + 1):
                    s.report(step, loss=loss)
                    if s.should_stop():
                        break
                samples.append((time.perf_counter() - t) / calls * 1e6)
            s.request_stop("bench over")
            with s.checkpoint(1):
                pass
    except SystemExit:  # the session ends this "shard" with SystemExit(3), as under baton
        pass
    print("session: report+should_stop median %.3f us per step (5 runs of %d: %s)" %
          (statistics.median(samples), calls, ", ".join("%.3f" % x for x in samples)), file=out)
    return statistics.median(samples)


def torch_step_ms(threads, steps, out):
    import torch
    from torch import nn
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5000, 100, generator=g)
    y = (x.sum(1, keepdim=True) > 0).float()
    model = nn.Sequential(nn.Linear(100, 2000), nn.ReLU(), nn.Linear(2000, 2000), nn.ReLU(),
                          nn.Linear(2000, 1), nn.Sigmoid())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    f = nn.BCELoss()
    times = []
    for s in range(steps + 3):
        i = torch.arange((s * 32) % 4960, (s * 32) % 4960 + 32)
        t = time.perf_counter()
        opt.zero_grad()
        f(model(x[i]), y[i]).backward()
        opt.step()
        if s >= 3:
            times.append((time.perf_counter() - t) * 1e3)
    ms = statistics.median(times)
    print("torch %s: seed step median %.2f ms (%d threads, %d steps)" %
          (torch.__version__, ms, threads, steps), file=out)
    return ms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--calls", type=int, default=200000)
    p.add_argument("--quick", action="store_true", help="a smoke run: few steps and calls")
    a = p.parse_args()
    if a.quick:
        a.steps, a.calls = 3, 20000
    out = os.fdopen(os.dup(2), "w")
    print("cpu: %s (%d cores), python %s" %
          (cpu_model(), os.cpu_count(), platform.python_version()), file=out)
    step_ms = torch_step_ms(a.threads, a.steps, out)
    us = session_cost(a.calls, out)
    print("ratio: %.2g%% of this machine's training step, %.2g%% of a 7 ms seed step "
          "(target: far under 1%%)" % (us / (step_ms * 1e3) * 100, us / 7e3 * 100), file=out)


if __name__ == "__main__":
    main()
