#!/usr/bin/env python3
"""The seed workload as a plain PyTorch script that runs under baton or standalone.

X = samples x features standard normal (seeded generator), y = (row sum > 0); Linear(features,
units) relu, Linear(units, units) relu, Linear(units, 1) sigmoid; BCE; Adam (lr 0.001); batch
32; a fresh shuffle every epoch drawn from (seed, epoch). Params (job.json "params"): epochs (20),
samples (5000), features (100), units (2000), batch_size (32), seed (0), threads (1), leak
(false: true keeps every step's loss with its graph and saved activations, a common real bug).
Lines marked `# baton` are all that baton needs (README.md; tests/python counts them).
"""
import sys
from pathlib import Path

import torch
from torch import nn

try:  # baton
    import baton  # baton
except ImportError:  # from a checkout: the package is in ../../../python  # baton
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))  # baton
    import baton  # baton
import baton.torch as bt  # baton


def main() -> None:
    with baton.Session() as session:  # baton
        p = session.params  # baton
        epochs, samples = p.get("epochs", 20), p.get("samples", 5000)
        features, units = p.get("features", 100), p.get("units", 2000)
        batch, seed, leak = p.get("batch_size", 32), p.get("seed", 0), p.get("leak", False)
        torch.set_num_threads(p.get("threads", 1))  # fixed, so that resume is bit-exact

        g = torch.Generator().manual_seed(seed)
        x = torch.randn(samples, features, generator=g)
        y = (x.sum(dim=1, keepdim=True) > 0).float()
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(features, units), nn.ReLU(), nn.Linear(units, units),
                              nn.ReLU(), nn.Linear(units, 1), nn.Sigmoid())
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.BCELoss()
        steps_per_epoch = -(-samples // batch)
        total = epochs * steps_per_epoch
        session.total_steps, session.steps_per_epoch = total, steps_per_epoch  # baton

        step = bt.load(session.restore_path, model, opt)["step"]  # baton
        kept = []  # the leak: every step's loss, graph and activations included
        while step < total and not session.should_stop():  # baton
            idx = bt.batch_indices(samples, batch, step, seed=seed)  # baton
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward(retain_graph=leak)
            opt.step()
            if leak:
                kept.append(loss)
            step += 1
            session.report(step, loss=loss.detach())  # baton
        with session.checkpoint(step) as folder:  # baton
            bt.save(folder, model, opt, step=step)  # baton


if __name__ == "__main__":
    main()
