"""A Keras 3 callback that makes ``model.fit`` a baton worker: it reports every batch, stops at
a batch boundary when baton asks (``model.stop_training = True``), checkpoints with
``model.save()`` into the session's folder (plus the epoch/batch position) and resumes.

Only Keras 3's public API is used: ``keras.callbacks.Callback``, ``Model.save``,
``Model.load_weights``, ``Model.fit(initial_epoch=...)``, ``optimizer.build``. Keras and
TensorFlow could not be installed where this was written: tests/python/test_keras.py checks the
logic against a stand-in ``keras`` module with Keras 3's callback interface, not real Keras.

Example::

    import baton, baton.keras
    with baton.Session() as s:
        model = build_and_compile()                 # built (called once) and compiled
        baton.keras.fit(model, x, y, s, batch_size=32, epochs=20, seed=0)
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

try:
    import keras as _keras
    _Base = _keras.callbacks.Callback
except ImportError:  # the class stays constructible (and testable) without Keras
    _keras = None
    _Base = object

__all__ = ["BatonCallback", "fit", "epoch_order", "MODEL_FILE", "POSITION_FILE"]

MODEL_FILE, POSITION_FILE = "model.keras", "position.json"


def epoch_order(n: int, epoch: int, seed: int = 0):
    """Epoch `epoch`'s sample order, a numpy permutation drawn from (seed, epoch) alone."""
    import numpy as np
    return np.random.default_rng([seed, epoch]).permutation(n)


class BatonCallback(_Base):  # type: ignore[misc,valid-type]
    """Report, stop, checkpoint and resume for ``model.fit`` under a `baton.Session`.

    Call `restore(model)` before ``fit`` to load the newest checkpoint; then pass
    ``initial_epoch=cb.initial_epoch`` and skip ``cb.initial_batch`` batches of that epoch (or
    let `fit` below do all of it).
    """

    def __init__(self, session, steps_per_epoch: Optional[int] = None) -> None:
        super().__init__()
        if _Base is object:  # Keras's Callback sets these itself (`model` is a property there)
            self.params: Dict[str, Any] = {}
            self.model = None
        self.session = session
        self.steps_per_epoch = steps_per_epoch
        self.initial_epoch = 0
        self.initial_batch = 0
        self.batch_offset = 0  # batches of the current epoch done before this fit() began
        self.step = session.restored_step
        self._epoch = 0
        self._saved_step: Optional[int] = None

    def restore(self, model) -> int:
        """Load the session's restore point into `model` (weights and optimizer state);
        returns the restored global step (0 on a fresh start)."""
        path = self.session.restore_path
        if path is None:
            return 0
        position = json.loads((Path(path) / POSITION_FILE).read_text())
        if getattr(model, "optimizer", None) is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # as BackupAndRestore does
        model.load_weights(str(Path(path) / MODEL_FILE))
        self.initial_epoch, self.initial_batch = position["epoch"], position["batch"]
        self.batch_offset = self.initial_batch
        self.step = position["step"]
        self._saved_step = self.step
        return self.step

    # Keras hooks -------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        steps = (self.params or {}).get("steps")
        if self.steps_per_epoch is None and steps:
            self.steps_per_epoch = steps + self.batch_offset
        if self.steps_per_epoch:
            self.session.steps_per_epoch = self.steps_per_epoch
        epochs = (self.params or {}).get("epochs")
        if self.session.total_steps is None and epochs and self.steps_per_epoch:
            self.session.total_steps = epochs * self.steps_per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        spe = self.steps_per_epoch or 0
        self.step = self._epoch * spe + self.batch_offset + batch + 1
        metrics = {k: v for k, v in logs.items() if k != "loss"}
        self.session.report(self.step, loss=logs.get("loss"), epoch=self._epoch, **metrics)
        if self.session.should_stop():
            self.model.stop_training = True
            self.checkpoint()

    def on_epoch_end(self, epoch, logs=None):
        self.batch_offset = 0

    def on_train_end(self, logs=None):
        if self.session.should_stop() and self._saved_step != self.step:
            self.checkpoint()

    # ---------------------------------------------------------------------------------------
    def checkpoint(self, model=None) -> None:
        """Save the model (``model.save``) and the position at the current step."""
        model = model if model is not None else self.model
        if self._saved_step == self.step:
            return
        spe = self.steps_per_epoch or 1
        epoch, batch = divmod(self.step, spe)
        with self.session.checkpoint(self.step) as folder:
            model.save(str(folder / MODEL_FILE))
            (folder / POSITION_FILE).write_text(json.dumps(
                {"step": self.step, "epoch": epoch, "batch": batch}))
        self._saved_step = self.step


def fit(model, x, y, session, *, batch_size: int = 32, epochs: int = 1, seed: int = 0,
        callbacks: Sequence[Any] = (), **fit_kwargs) -> BatonCallback:
    """Train `model` on arrays `x`, `y` to `epochs` under `session`, resuming bit-exactly.

    Each epoch's order comes from `epoch_order` (seed, epoch) and is fed with ``shuffle=False``,
    one ``fit`` call per epoch (the first one skipping the batches already done). Keras leaks
    memory on every ``fit`` call; baton recycles the process when it passes the soft limit.
    """
    n = len(x)
    spe = math.ceil(n / batch_size)
    cb = BatonCallback(session, steps_per_epoch=spe)
    session.steps_per_epoch = spe
    session.total_steps = epochs * spe
    cb.restore(model)
    epoch, skip = cb.initial_epoch, cb.initial_batch
    while epoch < epochs and not session.should_stop():
        order = epoch_order(n, epoch, seed)[skip * batch_size:]
        cb.batch_offset = skip
        model.fit(x[order], y[order], batch_size=batch_size, epochs=epoch + 1,
                  initial_epoch=epoch, shuffle=False, callbacks=[cb, *callbacks], **fit_kwargs)
        epoch, skip = epoch + 1, 0
    cb.checkpoint(model)
    return cb
