"""baton: run a Python trainer as a baton worker, or standalone, with the same script.

Standard library only; ``baton.torch`` and ``baton.keras`` import their frameworks lazily.

Example::

    import baton
    with baton.Session(total_steps=1000) as s:
        step = s.restored_step                    # 0 on a fresh start
        while step < 1000 and not s.should_stop():
            step += 1; s.report(step, loss=0.5)   # train one step here
        with s.checkpoint(step) as folder:        # a pathlib.Path; write any files
            (folder / "state.txt").write_text(str(step))
"""
from ._manifest import CheckpointError, seal_folder, verify_folder
from ._session import ConfigError, Session, __version__

__all__ = ["Session", "ConfigError", "CheckpointError", "seal_folder", "verify_folder",
           "__version__"]
