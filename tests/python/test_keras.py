"""baton.keras against a stand-in `keras` (Keras and TensorFlow cannot be installed here): a
fake module with Keras 3's Callback base class and the fit() loop's callback order."""
import importlib
import json
import sys
import types

import numpy as np
import pytest


def make_fake_keras():
    keras = types.ModuleType("keras")
    callbacks = types.ModuleType("keras.callbacks")

    class Callback:  # Keras 3's base: params, set_params, set_model, a `model` property
        def __init__(self):
            self.params = None
            self._model = None

        def set_params(self, params):
            self.params = params

        def set_model(self, model):
            self._model = model

        @property
        def model(self):
            return self._model

        def on_train_begin(self, logs=None): pass
        def on_train_end(self, logs=None): pass
        def on_epoch_begin(self, epoch, logs=None): pass
        def on_epoch_end(self, epoch, logs=None): pass
        def on_train_batch_begin(self, batch, logs=None): pass
        def on_train_batch_end(self, batch, logs=None): pass

    callbacks.Callback = Callback
    keras.callbacks = callbacks

    class Optimizer:
        def __init__(self):
            self.built = False
            self.iterations = 0

        def build(self, variables):
            self.built = True

    class Model:
        """Logistic regression trained by SGD; fit() calls callbacks as Keras 3's does."""

        def __init__(self, features):
            self.w = np.zeros(features)
            self.optimizer = Optimizer()
            self.stop_training = False
            self.built = True
            self.trainable_variables = [self.w]
            self.fit_calls = 0

        def fit(self, x, y, batch_size=32, epochs=1, initial_epoch=0, shuffle=True,
                callbacks=(), verbose=0):
            assert shuffle is False
            self.fit_calls += 1
            steps = -(-len(x) // batch_size)
            for cb in callbacks:
                cb.set_model(self)
                cb.set_params({"verbose": verbose, "epochs": epochs, "steps": steps})
            self.stop_training = False
            for cb in callbacks:
                cb.on_train_begin()
            for epoch in range(initial_epoch, epochs):
                for cb in callbacks:
                    cb.on_epoch_begin(epoch)
                for b in range(steps):
                    for cb in callbacks:
                        cb.on_train_batch_begin(b)
                    rows = slice(b * batch_size, (b + 1) * batch_size)
                    xb, yb = x[rows], y[rows]
                    p = 1 / (1 + np.exp(-xb @ self.w))
                    self.w = self.w - 0.1 * xb.T @ (p - yb) / len(xb)
                    self.optimizer.iterations += 1
                    loss = float(-np.mean(yb * np.log(p + 1e-9) + (1 - yb) * np.log(1 - p + 1e-9)))
                    for cb in callbacks:
                        cb.on_train_batch_end(b, {"loss": loss, "accuracy": 0.5})
                    if self.stop_training:
                        break
                for cb in callbacks:
                    cb.on_epoch_end(epoch, {"loss": loss})
                if self.stop_training:
                    break
            for cb in callbacks:
                cb.on_train_end()

        def save(self, path):
            assert path.endswith(".keras")
            with open(path, "wb") as f:
                np.save(f, np.append(self.w, self.optimizer.iterations))

        def load_weights(self, path):
            assert self.optimizer.built, "optimizer must be built before load_weights"
            with open(path, "rb") as f:
                a = np.load(f)
            self.w, self.optimizer.iterations = a[:-1], int(a[-1])

    keras.Model = Model
    return keras


@pytest.fixture
def bk(monkeypatch):
    fake = make_fake_keras()
    monkeypatch.setitem(sys.modules, "keras", fake)
    monkeypatch.setitem(sys.modules, "keras.callbacks", fake.callbacks)
    for k in list(sys.modules):
        if k.startswith("baton"):
            monkeypatch.delitem(sys.modules, k)
    import baton.keras
    importlib.reload(baton.keras)
    yield fake, baton.keras
    for k in list(sys.modules):
        if k == "baton.keras":
            del sys.modules[k]


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 5))
    return x, (x.sum(1) > 0).astype(float)


def run(tmp_path, fake, bk, stop_at=None):
    import baton

    class Stopper(fake.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if stop_at is not None and cb_holder and cb_holder[0].step == stop_at:
                session.request_stop("test")

    cb_holder = []
    model = fake.Model(5)
    with baton.Session(checkpoint_dir=tmp_path, handle_signals=False) as session:
        x, y = data()
        orig = bk.BatonCallback.__init__

        def capture(self, *a, **k):
            orig(self, *a, **k)
            cb_holder.append(self)

        bk.BatonCallback.__init__ = capture
        try:
            cb = bk.fit(model, x, y, session, batch_size=16, epochs=3, seed=7,
                        callbacks=[Stopper()])
        finally:
            bk.BatonCallback.__init__ = orig
    return model, cb, session


def test_callback_is_a_keras_callback(bk):
    fake, mod = bk
    assert issubclass(mod.BatonCallback, fake.callbacks.Callback)


def test_stop_at_a_batch_boundary_then_resume_is_exact(tmp_path, bk):
    fake, mod = bk
    whole, cb, _ = run(tmp_path / "whole", fake, mod)
    assert cb.step == 21 and whole.fit_calls == 3  # 7 batches x 3 epochs
    # the stop arrives after step 10 (from a later callback): honoured at the next boundary
    part, cb, s = run(tmp_path / "cut", fake, mod, stop_at=10)
    assert cb.step == 11 and part.stop_training and s.exit_code == 3
    pos = json.loads((tmp_path / "cut" / "ckpt-000000000011" / "position.json").read_text())
    assert pos == {"step": 11, "epoch": 1, "batch": 4}
    rest, cb, s = run(tmp_path / "cut", fake, mod)
    assert cb.initial_epoch == 1 and cb.initial_batch == 4 and cb.step == 21
    assert rest.fit_calls == 2 and s.exit_code == 0
    assert rest.optimizer.iterations == 21
    assert np.array_equal(rest.w, whole.w)


def test_constructible_without_keras(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras", None)  # import keras -> ImportError
    for k in list(sys.modules):
        if k == "baton.keras":
            monkeypatch.delitem(sys.modules, k)
    import baton.keras as bk2

    class S:
        restored_step = 0
    cb = bk2.BatonCallback(S())
    assert cb.step == 0 and cb.initial_epoch == 0
    monkeypatch.delitem(sys.modules, "baton.keras")
