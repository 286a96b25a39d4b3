"""`baton.Session`: the worker side of the baton protocol (protocol/README.md) in one object.

Under baton (``BATON_PROTOCOL_VERSION`` set) it speaks JSON lines on a private copy of the real
stdout, points fd 1 at stderr so ``print()`` and progress bars land in the job's log, watches
stdin for ``{"type":"stop"}`` and SIGTERM/SIGINT, and hands checkpoint folders to the supervisor,
which seals them. Standalone (no ``BATON_PROTOCOL_VERSION``) the same script runs to its end,
sealing its own folders in ``./baton-checkpoints`` and resuming from the newest that verifies.

Example::

    import baton
    with baton.Session(total_steps=100, steps_per_epoch=10) as s:
        step = s.restored_step
        while step < 100 and not s.should_stop():
            step += 1
            s.report(step, loss=1.0 / step, epoch=(step - 1) // 10)
        with s.checkpoint(step) as folder:
            (folder / "weights.bin").write_bytes(b"...")
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from ._manifest import (MANIFEST_NAME, CheckpointError, folder_name, seal_folder,
                        step_from_name, verify_folder)

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_STOPPED = 0, 1, 2, 3
_CKPT_RE = re.compile(r"^ckpt-\d{12}$")


class ConfigError(Exception):
    """A bad job, parameter or environment: the session sends an ``error`` line and exits 2.

    Raise it from the trainer for bad ``params``::

        if s.params.get("units", 1) < 1:
            raise baton.ConfigError("params.units: expected a positive integer")
    """


def _env_int(name: str, minimum: int = 0) -> Optional[int]:
    text = os.environ.get(name, "")
    if text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError("%s: expected an integer, got %r" % (name, text)) from None
    if value < minimum:
        raise ConfigError("%s: expected an integer >= %d, got %d" % (name, minimum, value))
    return value


def _number(x: Any) -> Optional[float]:
    """A JSON-safe float (NaN and infinities become null, as the protocol says)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class Session:
    """One worker process's share of a job (a context manager).

    Args:
        name: trainer name for the ``hello`` line (default: the script's file name).
        total_steps: the job's total optimizer steps, if known (also settable later).
        steps_per_epoch: needed when the job's shard is given in epochs.
        checkpoint_dir: standalone only: where folders are sealed (default
            ``./baton-checkpoints``).
        keep: standalone only: sealed folders kept (default: the job's ``checkpoints.keep``,
            else 2).
        job_file: the job document to read ``params`` from (default ``$BATON_JOB_FILE``).
        report_interval: seconds between two ``progress`` lines (``report`` is throttled).
        handle_signals: install SIGTERM/SIGINT handlers that ask for a stop.

    Attributes: ``restore_path`` (Path or None), ``restored_step`` (int), ``params`` (dict),
    ``under_baton`` (bool), ``total_steps``, ``steps_per_epoch``, ``exit_code``.
    """

    def __init__(self, name: Optional[str] = None, *, total_steps: Optional[int] = None,
                 steps_per_epoch: Optional[int] = None,
                 checkpoint_dir: "Optional[os.PathLike[str] | str]" = None,
                 keep: Optional[int] = None, job_file: "Optional[os.PathLike[str] | str]" = None,
                 report_interval: float = 0.1, handle_signals: bool = True) -> None:
        self.name = name or (Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python")
        self._entered = False
        self._total_steps = None if total_steps is None else int(total_steps)
        self._steps_per_epoch = None if steps_per_epoch is None else int(steps_per_epoch)
        self.under_baton = os.environ.get("BATON_PROTOCOL_VERSION", "") != ""
        self._checkpoint_dir_arg = checkpoint_dir
        self._keep_arg = keep
        self._job_file = job_file if job_file is not None else os.environ.get("BATON_JOB_FILE")
        self._interval = report_interval
        self._handle_signals = handle_signals
        self._lock = threading.Lock()
        self._fd: Optional[int] = None
        self._stop = False
        self._stop_reason = ""
        self._step = 0
        self._epoch: Optional[int] = None
        self._loss: Any = None
        self._metrics: Dict[str, Any] = {}
        self._next_send = 0.0
        self._last_sent_step = -1
        self._rate_t = 0.0
        self._rate_step = 0
        self._end_step: float = math.inf  # shard end in steps, once known
        self._epoch_end_pending = False
        self._checkpoint_step: Optional[int] = None
        self._done_sent = False
        self._old_handlers: Dict[int, Any] = {}
        self._epochs_unknown = False
        self._damaged: set = set()  # standalone: folders that failed verification at start
        self.job: Dict[str, Any] = {}
        self.params: Dict[str, Any] = {}
        self.restore_path: Optional[Path] = None
        self.restored_step = 0
        self.exit_code: Optional[int] = None
        self.batch_size: Optional[int] = None  # for samples_per_sec, when the trainer sets it

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Session":
        if self.under_baton:
            self._open_channel()
            self._send({"type": "hello", "protocol": PROTOCOL_VERSION, "pid": os.getpid(),
                        "worker": "%s baton-python %s" % (self.name, __version__)})
        try:
            self._configure()
        except ConfigError as e:
            self._fail(str(e), EXIT_CONFIG)
        if self._handle_signals:
            self._install_signals()
        if self.under_baton:
            threading.Thread(target=self._read_stdin, name="baton-stdin", daemon=True).start()
        self._rate_t = time.monotonic()
        self._rate_step = self.restored_step
        self._step = self.restored_step
        return self

    def __exit__(self, exc_type, exc, tb) -> Optional[bool]:
        self._restore_signals()
        if exc_type is None:
            code = self._finish()
        elif issubclass(exc_type, SystemExit):
            return None
        elif issubclass(exc_type, ConfigError):
            code = self._report_failure(exc, EXIT_CONFIG, tb)
        elif issubclass(exc_type, Exception):
            code = self._report_failure(exc, EXIT_ERROR, tb)
        else:  # KeyboardInterrupt and friends: not ours to translate
            return None
        self.exit_code = code
        if self.under_baton:
            sys.stdout.flush()
            sys.stderr.flush()
            raise SystemExit(code)
        return None if exc_type is None else False

    def _finish(self) -> int:
        step = self._checkpoint_step if self._checkpoint_step is not None else self._step
        if self._checkpoint_step is None and step > self.restored_step:
            print("baton: warning: ending at step %d without a checkpoint since step %d; "
                  "the steps in between are lost" % (step, self.restored_step), file=sys.stderr)
            step = self.restored_step
        complete = self.total_steps is not None and step >= self.total_steps
        self._flush_progress()
        if self.under_baton and not self._done_sent:
            self._send({"type": "done", "step": step, "job_complete": complete})
            self._done_sent = True
        return EXIT_STOPPED if (self._stop and not complete) else EXIT_OK

    def _report_failure(self, exc: BaseException, code: int, tb) -> int:
        message = str(exc) or type(exc).__name__
        if code == EXIT_ERROR:
            message = "%s: %s" % (type(exc).__name__, message)
            if self.under_baton:
                traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
        if self.under_baton:
            self._send({"type": "error", "message": message})
        return code

    def _fail(self, message: str, code: int) -> None:
        if self.under_baton:
            self._send({"type": "error", "message": message})
            sys.stderr.write("baton: %s\n" % message)
            raise SystemExit(code)
        raise ConfigError(message)

    # ------------------------------------------------------------------ configuration
    def _configure(self) -> None:
        if self._job_file:
            try:
                with open(self._job_file, "rb") as f:
                    self.job = json.loads(f.read().decode("utf-8"))
            except (OSError, ValueError) as e:
                raise ConfigError("cannot read the job file %s: %s" % (self._job_file, e))
            if not isinstance(self.job, dict):
                raise ConfigError("job file %s: not a JSON object" % self._job_file)
            params = self.job.get("params", {})
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise ConfigError("params: expected an object, got %s" % type(params).__name__)
            self.params = params
        if self.under_baton:
            self._shard_steps = _env_int("BATON_SHARD_STEPS", 1)
            self._shard_epochs = _env_int("BATON_SHARD_EPOCHS", 1)
            self._max_steps = _env_int("BATON_MAX_STEPS", 1)
            self._start_step_env = _env_int("BATON_START_STEP", 0) or 0
            self._staging = os.environ.get("BATON_STAGING_DIR") or None
            resume = os.environ.get("BATON_RESUME_FROM") or None
            if resume:
                self.restore_path = Path(resume)
                self.restored_step = self._step_of(self.restore_path)
            elif not self._staging:
                # A supervisor from before folder checkpoints (no BATON_STAGING_DIR) names no
                # resume path; it verified ckpt-<BATON_START_STEP>.safetensors before the spawn.
                ckdir = os.environ.get("BATON_CHECKPOINT_DIR", "")
                if self._start_step_env > 0 and ckdir:
                    p = Path(ckdir) / ("ckpt-%012d.safetensors" % self._start_step_env)
                    if p.is_file():
                        self.restore_path, self.restored_step = p, self._start_step_env
        else:
            self._shard_steps = self._shard_epochs = self._max_steps = None
            self._staging = None
            ckdir = self._checkpoint_dir_arg or "baton-checkpoints"
            self.checkpoint_dir = Path(ckdir).absolute()
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            for leftover in self.checkpoint_dir.glob(".staging-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            self._find_standalone_resume()
        self._entered = True
        self._compute_end()

    def _step_of(self, path: Path) -> int:
        if path.is_dir():
            try:
                with open(path / MANIFEST_NAME, "rb") as f:
                    step = json.loads(f.read().decode("utf-8")).get("step")
                if isinstance(step, int) and step >= 0:
                    return step
            except (OSError, ValueError):
                pass
        step = step_from_name(path)
        if step is None:
            raise ConfigError("BATON_RESUME_FROM: cannot tell the step of %s" % path)
        return step

    def _find_standalone_resume(self) -> None:
        names = sorted((p for p in self.checkpoint_dir.iterdir() if _CKPT_RE.match(p.name)),
                       reverse=True)
        for p in names:
            try:
                m = verify_folder(p)
            except (CheckpointError, OSError) as e:
                print("baton: skipped checkpoint %s: %s" % (p, e), file=sys.stderr)
                self._damaged.add(p.name)
                continue
            self.restore_path, self.restored_step = p, m["step"]
            return

    def _compute_end(self) -> None:
        end = math.inf
        start = self.restored_step
        shard = self._shard_steps
        if shard is None and self._shard_epochs is not None and self.steps_per_epoch:
            shard = self._shard_epochs * self.steps_per_epoch
        if shard is not None:
            end = (start // shard + 1) * shard  # aligned shards, as baton-worker's
        if self._max_steps is not None:
            end = min(end, start + self._max_steps)
        if self.total_steps is not None:
            end = min(end, self.total_steps)
        self._end_step = end
        self._epochs_unknown = shard is None and self._shard_epochs is not None

    @property
    def total_steps(self) -> Optional[int]:
        """The job's total optimizer steps (None if unknown); sent in every progress line."""
        return self._total_steps

    @total_steps.setter
    def total_steps(self, value: Optional[int]) -> None:
        self._total_steps = None if value is None else int(value)
        if self._entered:
            self._compute_end()

    @property
    def steps_per_epoch(self) -> Optional[int]:
        """Steps in one epoch; needed when the job's shard is given in epochs."""
        return self._steps_per_epoch

    @steps_per_epoch.setter
    def steps_per_epoch(self, value: Optional[int]) -> None:
        self._steps_per_epoch = None if value is None else int(value)
        if self._entered:
            self._compute_end()

    @property
    def shard_end(self) -> Optional[int]:
        """The step this process stops at (shard end, BATON_MAX_STEPS, total), if known."""
        if self._epochs_unknown:
            return None
        return None if self._end_step == math.inf else int(self._end_step)

    # ------------------------------------------------------------------ protocol channel
    def _open_channel(self) -> None:
        """Protocol lines go to a private dup of the real stdout; fd 1 becomes stderr."""
        try:
            sys.stdout.flush()
        except (AttributeError, ValueError, OSError):
            pass
        self._fd = os.dup(1)  # not inheritable (PEP 446): children never get the channel
        os.dup2(2, 1)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True,
                                      write_through=True)

    def _send(self, msg: Dict[str, Any]) -> None:
        if self._fd is None:
            return
        data = (json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
                + "\n").encode("utf-8", "replace")
        with self._lock:
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
            except (BrokenPipeError, OSError):
                self._fd = None  # the supervisor is gone; finish the shard quietly
                self._request_stop("protocol channel closed")

    def _read_stdin(self) -> None:
        # Raw reads of fd 0, not sys.stdin: a daemon thread blocked inside a buffered reader
        # would hold its lock and abort the interpreter at exit (CPython's "could not acquire
        # lock for <stdin> at interpreter shutdown").
        pending = b""
        while True:
            try:
                chunk = os.read(0, 65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return  # EOF, or a closed stdin, is not a stop
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line.decode("utf-8", "replace"))
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("type") == "stop":
                    self._request_stop("stop message")

    def _request_stop(self, reason: str) -> None:
        if not self._stop:
            self._stop_reason = reason
        self._stop = True

    def request_stop(self, reason: str = "trainer") -> None:
        """Ask for a stop from inside the trainer (as a ``stop`` line would)."""
        self._request_stop(reason)

    @property
    def stop_requested(self) -> bool:
        """True once a stop was asked (stop line, SIGTERM, SIGINT, request_stop())."""
        return self._stop

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            if self._stop and signum == signal.SIGINT and not self.under_baton:
                raise KeyboardInterrupt  # a second Ctrl-C, standalone: stop waiting
            self._request_stop("signal %d" % signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                pass

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError, TypeError):
                pass
        self._old_handlers.clear()

    # ------------------------------------------------------------------ per step
    def should_stop(self) -> bool:
        """True when this process should checkpoint and end: a stop was asked, or the last
        reported step reached the shard's end, ``BATON_MAX_STEPS`` or ``total_steps``."""
        if self._stop or self._step >= self._end_step:
            return True
        if self._epochs_unknown:
            raise ConfigError("the job's shard is given in epochs: pass "
                              "Session(steps_per_epoch=...) so the shard's end is known")
        return False

    def report(self, step: int, loss: Any = None, epoch: Optional[int] = None,
               **metrics: Any) -> None:
        """Record the latest step (global optimizer steps done), cheaply; a ``progress`` line
        goes out at most every ``report_interval`` seconds. ``loss`` and metric values may be
        tensors: they are converted with ``float()`` only when a line is sent. ``epoch`` is the
        0-based epoch the step belongs to (derived from ``steps_per_epoch`` when omitted).
        A ``total_steps=`` keyword sets the job's total."""
        self._step = step
        self._loss = loss
        if epoch is not None:
            self._epoch = epoch
        if metrics:
            if "total_steps" in metrics:
                self.total_steps = int(metrics.pop("total_steps"))
            self._metrics = metrics
        now = time.monotonic()
        if now >= self._next_send or step >= self._end_step:
            self._next_send = now + self._interval
            self._send_progress(now)

    def _send_progress(self, now: float) -> None:
        step = self._step
        epoch = self._epoch
        if epoch is None:
            epoch = (max(step, 1) - 1) // self.steps_per_epoch if self.steps_per_epoch else 0
        rate = None
        if self.batch_size and now > self._rate_t:
            rate = (step - self._rate_step) * self.batch_size / (now - self._rate_t)
        self._rate_t, self._rate_step = now, step
        self._last_sent_step = step
        if self._fd is None:
            return
        self._send({"type": "progress", "step": step, "total_steps": self.total_steps or 0,
                    "epoch": int(epoch), "loss": _number(self._loss),
                    "metrics": {k: _number(v) for k, v in self._metrics.items()},
                    "samples_per_sec": _number(rate)})

    def _flush_progress(self) -> None:
        if self._last_sent_step != self._step:
            self._send_progress(time.monotonic())

    # ------------------------------------------------------------------ checkpoints
    @contextlib.contextmanager
    def checkpoint(self, step: int) -> Iterator[Path]:
        """A folder to write one checkpoint of global step `step` into (any files, subfolders).

        On a clean exit of the block the folder is handed over: under baton it is announced
        (the supervisor seals it), standalone it is sealed here, renamed to ``ckpt-<step>`` and
        old ones are pruned. If the block raises, the folder is removed and nothing announced.
        """
        if self.under_baton and not self._staging:
            raise CheckpointError("this baton supervisor sets no BATON_STAGING_DIR, so it "
                                  "cannot take folder checkpoints (it predates them)")
        if not isinstance(step, int) or step < 0:
            raise ValueError("checkpoint step must be a non-negative int, got %r" % (step,))
        if self.under_baton:
            parent = Path(self._staging)
        else:
            parent = self.checkpoint_dir / (".staging-%d" % os.getpid())
        folder = parent / ("step-%d" % step)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            yield folder
            if os.path.lexists(folder / MANIFEST_NAME):
                raise CheckpointError("%s: the trainer must not write %s itself (baton does)" %
                                      (folder / MANIFEST_NAME, MANIFEST_NAME))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            if not self.under_baton:
                try:
                    parent.rmdir()
                except OSError:
                    pass
            raise
        newest = self._checkpoint_step
        if newest is None and self.restore_path is not None:
            newest = self.restored_step
        if newest is not None and step <= newest:
            # Nothing new since the newest checkpoint (e.g. a stop before the first step): the
            # supervisor would reject a step that does not advance, so nothing is announced.
            shutil.rmtree(folder, ignore_errors=True)
            print("baton: checkpoint at step %d not kept: the newest one is at step %d" %
                  (step, newest), file=sys.stderr)
            return
        self._flush_progress()
        if self.under_baton:
            self._send({"type": "checkpoint", "path": str(folder.absolute()), "step": step})
        else:
            self._seal_standalone(folder, step)
        self._checkpoint_step = step

    def _seal_standalone(self, folder: Path, step: int) -> None:
        seal_folder(folder, job=str(self.job.get("name", self.name)), step=step)
        final = self.checkpoint_dir / folder_name(step)
        if final.exists():
            shutil.rmtree(final)
        os.replace(folder, final)
        try:
            folder.parent.rmdir()
        except OSError:
            pass
        if os.name != "nt":
            fd = os.open(self.checkpoint_dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        keep = self._keep_arg or int(self.job.get("checkpoints", {}).get("keep", 2) or 2)
        sealed = sorted(p for p in self.checkpoint_dir.iterdir()
                        if _CKPT_RE.match(p.name) and p.is_dir())
        for old in sealed:
            if old.name in self._damaged and old.name < final.name:  # known bad, superseded
                shutil.rmtree(old, ignore_errors=True)
                self._damaged.discard(old.name)
        sealed = [p for p in sealed if p.exists()]
        for old in sealed[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        print("baton: sealed %s" % final, file=sys.stderr)

    def announce_file(self, path: "os.PathLike[str] | str", step: int, digest: str) -> None:
        """Announce a baton checkpoint FILE (``ckpt-<step>.safetensors`` with its ``digest``)
        that the trainer wrote itself into ``$BATON_CHECKPOINT_DIR``; the low-level way of
        protocol v1 (see protocol/README.md). Does nothing standalone."""
        self._flush_progress()
        self._send({"type": "checkpoint", "path": str(Path(path).absolute()), "step": step,
                    "digest": digest})
        self._checkpoint_step = step
