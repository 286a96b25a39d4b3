#!/usr/bin/env python3
"""The seed workload in PyTorch CPU, for worker_bench to compare against (spawned with argv).

X = 5000x100 standard normal, y = (row sum > 0); Linear(100, 2000) relu, Linear(2000, 2000) relu,
Linear(2000, 1); BCE from logits; Adam with Keras defaults; batches of 32 in order. Prints one
"epoch <seconds>" line per timed epoch. Exits 3 with "unavailable: ..." when torch is missing.
"""
import argparse
import sys
import time

try:
    import torch
    from torch import nn
except ImportError as e:  # the bench treats PyTorch as optional
    print(f"unavailable: {e}", flush=True)
    sys.exit(3)


def blas_library():
    """The BLAS torch resolved at run time (Debian picks it by update-alternatives)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "blas" in line.lower():
                    return line.split()[-1]
    except OSError:
        pass
    return "unknown"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="steps per epoch; 0 = the whole epoch")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs first")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"blas {blas_library()}", flush=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5000, 100, generator=g)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(100, 2000), nn.ReLU(), nn.Linear(2000, 2000), nn.ReLU(),
                          nn.Linear(2000, 1))
    for m in model:
        if isinstance(m, nn.Linear):  # Keras's default init, for a like-for-like run
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.BCEWithLogitsLoss()
    batch = 32
    steps = a.steps if a.steps > 0 else (x.shape[0] + batch - 1) // batch

    def epoch():
        for s in range(steps):
            xb = x[s * batch:(s + 1) * batch]
            yb = y[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        return float(loss)

    for _ in range(a.warmup):
        epoch()
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        loss = epoch()
        print(f"epoch {time.perf_counter() - t0:.6f} loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
