"""baton.Session against a fake supervisor: every protocol line, exit code and stop path."""
import json
import signal
import textwrap
import time

import pytest

from conftest import write_script

LOOP = textwrap.dedent('''
    import sys, time, baton
    with baton.Session(total_steps=TOTAL, steps_per_epoch=10) as s:
        step = s.restored_step
        print("plain print on stdout")
        while step < TOTAL and not s.should_stop():
            step += 1
            print("\\r[" + "=" * (step % 20) + "] step %d" % step, end="", flush=True)
            s.report(step, loss=1.0 / step, accuracy=0.5)
            time.sleep(SLEEP)
        with s.checkpoint(step) as folder:
            (folder / "state.json").write_text(str(step))
            (folder / "sub").mkdir()
            (folder / "sub" / "more.bin").write_bytes(b"x" * step)
    print("never reached under baton")
''')


def loop(tmp_path, total=30, sleep=0.0):
    return write_script(tmp_path, LOOP.replace("TOTAL", str(total)).replace("SLEEP", str(sleep)))


def test_hello_progress_checkpoint_done_and_exit_0(tmp_path, worker):
    w = worker(loop(tmp_path), env={"BATON_SHARD_STEPS": "12"})
    hello = w.read_message()
    assert hello["type"] == "hello" and hello["protocol"] == 1
    assert hello["pid"] == w.proc.pid
    assert hello["worker"].startswith("trainer baton-python ")
    assert w.finish() == 0, w.stderr
    types = [m["type"] for m in w.lines]
    assert types[0] == "hello" and types[-2:] == ["checkpoint", "done"]
    progress = [m for m in w.lines if m["type"] == "progress"]
    assert progress and progress[-1]["step"] == 12 and progress[-1]["total_steps"] == 30
    assert progress[-1]["epoch"] == 1 and progress[-1]["metrics"] == {"accuracy": 0.5}
    ck = w.lines[-2]
    assert ck == {"type": "checkpoint", "path": str(w.staging / "step-12"), "step": 12}
    assert (w.staging / "step-12" / "sub" / "more.bin").read_bytes() == b"x" * 12
    assert w.lines[-1] == {"type": "done", "step": 12, "job_complete": False}
    # print() and \r progress bars went to stderr, the job's log, never to the protocol channel
    assert "plain print on stdout" in w.stderr and "] step 12" in w.stderr
    assert "never reached" not in w.stderr


def test_last_shard_completes_the_job(tmp_path, worker):
    w = worker(loop(tmp_path, total=20), env={"BATON_SHARD_STEPS": "100"})
    assert w.finish() == 0, w.stderr
    assert w.lines[-1] == {"type": "done", "step": 20, "job_complete": True}


def test_resume_from_folder_manifest_step_and_aligned_shard(tmp_path, worker):
    prev = tmp_path / "ckpt" / "ckpt-000000000010"
    prev.mkdir(parents=True)
    (prev / "baton-manifest.json").write_text(json.dumps({"step": 10}))
    w = worker(loop(tmp_path), env={"BATON_SHARD_STEPS": "7", "BATON_RESUME_FROM": str(prev),
                                    "BATON_START_STEP": "10"})
    assert w.finish() == 0, w.stderr
    assert w.lines[-1]["step"] == 14  # shards are aligned: 10 -> 14 with 7-step shards


def test_max_steps_and_shard_in_epochs(tmp_path, worker):
    w = worker(loop(tmp_path), env={"BATON_SHARD_EPOCHS": "2", "BATON_MAX_STEPS": "5"})
    assert w.finish() == 0, w.stderr
    assert w.lines[-1]["step"] == 5
    w = worker(loop(tmp_path), env={"BATON_SHARD_EPOCHS": "2"})
    assert w.finish() == 0, w.stderr
    assert w.lines[-1]["step"] == 20


@pytest.mark.parametrize("how", ["stdin", "sigterm", "sigint"])
def test_stop_checkpoints_and_exits_3(tmp_path, worker, how):
    w = worker(loop(tmp_path, total=100000, sleep=0.002))
    w.read_message()
    w.wait_for("progress")
    if how == "stdin":
        w.send({"type": "stop"})
    else:
        w.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    assert w.finish() == 3, w.stderr
    ck, done = w.lines[-2], w.lines[-1]
    assert ck["type"] == "checkpoint" and done["type"] == "done"
    assert done["step"] == ck["step"] and 0 < ck["step"] < 100000
    assert done["job_complete"] is False


def test_closed_stdin_is_not_a_stop(tmp_path, worker):
    w = worker(loop(tmp_path, total=50, sleep=0.001), stdin_open=False)
    assert w.finish() == 0, w.stderr
    assert w.lines[-1] == {"type": "done", "step": 50, "job_complete": True}


def test_exception_sends_error_and_exits_1_and_discards_the_folder(tmp_path, worker):
    script = write_script(tmp_path, textwrap.dedent('''
        import baton
        with baton.Session() as s:
            with s.checkpoint(5) as folder:
                (folder / "half.bin").write_bytes(b"half")
                raise RuntimeError("disk on fire")
    '''))
    w = worker(script)
    assert w.finish() == 1
    assert [m["type"] for m in w.lines] == ["hello", "error"]
    assert w.lines[-1]["message"] == "RuntimeError: disk on fire"
    assert not (w.staging / "step-5").exists()
    assert "Traceback" in w.stderr


def test_config_error_exits_2(tmp_path, worker):
    script = write_script(tmp_path, textwrap.dedent('''
        import baton
        with baton.Session() as s:
            if s.params.get("units", 0) < 1:
                raise baton.ConfigError("params.units: expected a positive integer")
    '''))
    w = worker(script, job={"name": "t", "params": {"units": 0}})
    assert w.finish() == 2
    assert w.lines[-1] == {"type": "error", "message": "params.units: expected a positive integer"}
    w = worker(loop(tmp_path), env={"BATON_SHARD_STEPS": "many"})
    assert w.finish() == 2
    assert w.lines[-1]["type"] == "error" and "BATON_SHARD_STEPS" in w.lines[-1]["message"]


def test_params_from_the_job_file(tmp_path, worker):
    script = write_script(tmp_path, textwrap.dedent('''
        import baton
        with baton.Session() as s:
            print("PARAMS", s.params, s.restore_path)
    '''))
    w = worker(script, job={"name": "t", "params": {"lr": 0.5, "layers": [1, 2]}})
    assert w.finish() == 0
    assert "PARAMS {'lr': 0.5, 'layers': [1, 2]} None" in w.stderr


def test_progress_is_throttled(tmp_path, worker):
    w = worker(loop(tmp_path, total=20000))
    assert w.finish() == 0, w.stderr
    progress = [m for m in w.lines if m["type"] == "progress"]
    assert progress[-1]["step"] == 20000 and len(progress) < 200


def test_standalone_runs_to_the_end_and_resumes(tmp_path):
    import subprocess, os, sys
    from conftest import PYTHON_DIR
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    env["PYTHONPATH"] = str(PYTHON_DIR)
    script = loop(tmp_path, total=25)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "never reached under baton" in r.stdout  # standalone: the script goes on
    folder = tmp_path / "baton-checkpoints" / "ckpt-000000000025"
    sys.path.insert(0, str(PYTHON_DIR))
    import baton
    assert baton.verify_folder(folder)["step"] == 25
    # Resume from the newest verified folder; a damaged newer one is skipped, with its reason.
    bad = tmp_path / "baton-checkpoints" / "ckpt-000000000030"
    bad.mkdir()
    (bad / "baton-manifest.json").write_text("{")
    script = loop(tmp_path, total=40)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "skipped checkpoint %s: " % bad in r.stderr and "not JSON" in r.stderr
    assert "step 26" in r.stdout and "step 25" not in r.stdout.split("plain print")[1][:40]
    names = sorted(p.name for p in (tmp_path / "baton-checkpoints").iterdir())
    assert names == ["ckpt-000000000025", "ckpt-000000000040"]  # pruned to keep=2


def test_a_stop_before_the_first_step_announces_nothing_new(tmp_path, worker):
    prev = tmp_path / "ckpt" / "ckpt-000000000010"
    prev.mkdir(parents=True)
    (prev / "baton-manifest.json").write_text(json.dumps({"step": 10}))
    script = write_script(tmp_path, textwrap.dedent('''
        import baton
        with baton.Session(total_steps=50) as s:
            s.request_stop("before any step")
            step = s.restored_step
            while not s.should_stop():
                step += 1
            with s.checkpoint(step) as folder:
                (folder / "w.bin").write_bytes(b"same as step 10")
    '''))
    w = worker(script, env={"BATON_RESUME_FROM": str(prev), "BATON_START_STEP": "10"})
    assert w.finish() == 3, w.stderr
    assert [m["type"] for m in w.lines] == ["hello", "progress", "done"]
    assert w.lines[-1] == {"type": "done", "step": 10, "job_complete": False}
    assert not (w.staging / "step-10").exists()


def test_a_forged_manifest_is_refused_before_the_supervisor_sees_it(tmp_path, worker):
    script = write_script(tmp_path, textwrap.dedent('''
        import baton
        with baton.Session() as s:
            with s.checkpoint(3) as folder:
                (folder / "baton-manifest.json").write_text("{}")
    '''))
    w = worker(script)
    assert w.finish() == 1
    assert w.lines[-1]["type"] == "error" and "must not write" in w.lines[-1]["message"]
    assert not (w.staging / "step-3").exists()
