"""examples/python/train.py, a real PyTorch job, under `blox local`: it is
preempted by LAS, checkpoints model and optimiser, resumes where it stopped
and finishes. Skipped where torch is not installed (CI installs no torch)."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: the PyTorch example job is not run")

from test_under_blox import CONFIG, job_stderr, run_local  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def train(name, arrival, steps):
    return f"""
[[job]]
name = "{name}"
arrival_s = {arrival}
gpus = 1
command = ["{sys.executable}", "{ROOT / 'examples' / 'python' / 'train.py'}", "--steps", "{steps}", "--step-sleep-s", "0.01", "--checkpoint-every", "50"]
"""


def test_the_pytorch_example_is_preempted_and_resumes_from_its_checkpoint(tmp_path):
    jobs = run_local(tmp_path, CONFIG, train("long", 0, 300) + train("short", 2.0, 50))
    long, short = jobs["long"], jobs["short"]
    assert long["status"] == "finished" and short["status"] == "finished", jobs
    assert int(long["preemptions"]) >= 1, long
    err = job_stderr(tmp_path)
    assert "train.py: lease revoked; checkpointed at step" in err, err
    assert "train.py: resumed at step" in err, err
    assert "train.py: done, loss" in err, err
    # Importing torch is start-up, measured and kept apart.
    assert float(long["startup_s"]) > 0.2, long
