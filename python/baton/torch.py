"""Bit-exact PyTorch checkpoints in a baton folder: model, optimizer, LR scheduler, every RNG and
the position in the data order. Imports torch (and numpy, only if the trainer already did).

Resume is bit-exact when the data order is a function of (seed, epoch): use `epoch_order` (or
`batch_indices`), fix ``torch.set_num_threads``, and run the same torch build on the same machine.

Example::

    import baton, baton.torch as bt
    with baton.Session(total_steps=total, steps_per_epoch=spe) as s:
        step = bt.load(s.restore_path, model, opt)["step"]  # 0 on a fresh start
        while step < total and not s.should_stop():
            idx = bt.batch_indices(n, 32, step, seed=0); ...; step += 1; s.report(step, loss=loss)
        with s.checkpoint(step) as folder:
            bt.save(folder, model, opt, step=step)
"""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch

__all__ = ["save", "load", "epoch_order", "batch_indices", "rng_state", "set_rng_state"]

MODEL_FILE, TRAINING_FILE, POSITION_FILE = "model.pt", "training.pt", "position.json"
PathLike = Union[str, "os.PathLike[str]"]
_MASK63 = (1 << 63) - 1


def _epoch_seed(seed: int, epoch: int) -> int:
    """A generator seed for (seed, epoch): distinct epochs get unrelated permutations."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB)
    x &= (1 << 64) - 1
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & ((1 << 64) - 1)
    return (x ^ (x >> 32)) & _MASK63


def epoch_order(n: int, epoch: int, seed: int = 0, shuffle: bool = True) -> "torch.Tensor":
    """Epoch `epoch`'s sample order: a permutation of range(n) from a torch.Generator seeded by
    (seed, epoch), independent of any global RNG, so a resumed process draws the same one."""
    if not shuffle:
        return torch.arange(n)
    g = torch.Generator()
    g.manual_seed(_epoch_seed(seed, epoch))
    return torch.randperm(n, generator=g)


_ORDER_CACHE: Dict[Any, "torch.Tensor"] = {}


def batch_indices(n: int, batch_size: int, step: int, seed: int = 0,
                  shuffle: bool = True) -> "torch.Tensor":
    """Sample indices of global step `step` (0-based): batch ``step % steps_per_epoch`` of
    epoch ``step // steps_per_epoch`` in `epoch_order` (the last batch may be short)."""
    spe = -(-n // batch_size)
    epoch, k = divmod(step, spe)
    key = (n, epoch, seed, shuffle)
    order = _ORDER_CACHE.get(key)
    if order is None:
        _ORDER_CACHE.clear()
        order = _ORDER_CACHE[key] = epoch_order(n, epoch, seed, shuffle)
    return order[k * batch_size:(k + 1) * batch_size]


def rng_state() -> Dict[str, Any]:
    """Every RNG's state: torch CPU, CUDA (when initialised), numpy's global one (if numpy is
    imported) and Python's `random`."""
    state: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np  # it was imported when the state was taken
        np.random.set_state(state["numpy"])


def save(folder: PathLike, model: "torch.nn.Module", optimizer: Optional[Any] = None,
         scheduler: Optional[Any] = None, *, step: int, epoch: Optional[int] = None,
         batch: Optional[int] = None, extra: Optional[Dict[str, Any]] = None) -> None:
    """Write `model.pt` (state_dict), `training.pt` (optimizer, scheduler, RNGs, extra) and
    `position.json` (step, epoch, batch in epoch) into `folder` (a Session.checkpoint folder)."""
    folder = Path(folder)
    torch.save(model.state_dict(), folder / MODEL_FILE)
    training = {"optimizer": optimizer.state_dict() if optimizer is not None else None,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng_state(), "extra": extra}
    torch.save(training, folder / TRAINING_FILE)
    position = {"step": step, "epoch": epoch, "batch": batch, "torch": torch.__version__}
    (folder / POSITION_FILE).write_text(json.dumps(position))


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch before 1.13 has no weights_only
        return torch.load(path, map_location="cpu")


def load(folder: Optional[PathLike], model: "torch.nn.Module", optimizer: Optional[Any] = None,
         scheduler: Optional[Any] = None, restore_rng: bool = True) -> Dict[str, Any]:
    """Restore what `save` wrote (into the given objects, in place) and return the position:
    ``{"step": ..., "epoch": ..., "batch": ..., "extra": ...}``. With `folder` None (a fresh
    start: ``Session.restore_path`` is None) nothing is touched and the position is step 0."""
    if folder is None:
        return {"step": 0, "epoch": 0, "batch": 0, "extra": None}
    folder = Path(folder)
    model.load_state_dict(_torch_load(folder / MODEL_FILE))
    training = _torch_load(folder / TRAINING_FILE)
    if optimizer is not None and training.get("optimizer") is not None:
        optimizer.load_state_dict(training["optimizer"])
    if scheduler is not None and training.get("scheduler") is not None:
        scheduler.load_state_dict(training["scheduler"])
    if restore_rng:
        set_rng_state(training["rng"])
    position = json.loads((folder / POSITION_FILE).read_text())
    position["extra"] = training.get("extra")
    return position
