"""configs/examples/python-worker/train.py on the package: the file checkpoints tests/chaos and
tests/integration read, the folder mode, a stop, standalone."""
import json
import os
import signal
import subprocess
import sys

from conftest import PYTHON_DIR, ROOT, Worker
import baton

EXAMPLE = ROOT / "configs" / "examples" / "python-worker" / "train.py"
JOB = json.loads((EXAMPLE.parent / "job.json").read_text())
JOB["debug"]["leak_mib_per_step"] = 0


def test_file_checkpoints_in_two_shards_then_a_stop(tmp_path):
    w = Worker(EXAMPLE, tmp_path, job=JOB, env={"BATON_SHARD_EPOCHS": "3",
                                                "BATON_STAGING_DIR": None})
    assert w.finish() == 0, w.stderr
    ck = w.lines[-2]
    assert ck["type"] == "checkpoint" and ck["step"] == 48 and ck["digest"].startswith("xxh64:")
    assert ck["path"] == str(w.ckpt / "ckpt-000000000048.safetensors")
    assert w.lines[-1] == {"type": "done", "step": 48, "job_complete": False}
    # A supervisor from before folder checkpoints: BATON_START_STEP names the file to resume.
    w = Worker(EXAMPLE, tmp_path, job=JOB, stdin_open=True,
               env={"BATON_SHARD_EPOCHS": "3", "BATON_START_STEP": "48",
                    "BATON_STAGING_DIR": None})
    w.read_message()
    first = w.wait_for("progress")
    assert first["step"] > 48
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 3, w.stderr
    ck, done = w.lines[-2], w.lines[-1]
    assert ck["type"] == "checkpoint" and 48 < ck["step"] <= 96 and done["step"] == ck["step"]


def test_folder_mode_and_standalone_agree(tmp_path):
    job = dict(JOB, params={"checkpoint": "folder"})
    w = Worker(EXAMPLE, tmp_path / "b", job=job, env={"BATON_SHARD_EPOCHS": "6"})
    assert w.finish() == 0, w.stderr
    ck = w.lines[-2]
    assert ck == {"type": "checkpoint", "path": str(w.staging / "step-96"), "step": 96}
    under_baton = (w.staging / "step-96" / "weights.safetensors").read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "job.json").write_text(json.dumps(JOB))
    env.update(PYTHONPATH=str(PYTHON_DIR), BATON_JOB_FILE=str(tmp_path / "s" / "job.json"))
    r = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path / "s", env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "s" / "baton-checkpoints" / "ckpt-000000000096"
    baton.verify_folder(folder)
    assert (folder / "weights.safetensors").read_bytes() == under_baton
