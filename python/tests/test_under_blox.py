"""Python jobs run by the real runtime: `blox local` launches them, LAS
preempts one, it resumes from its checkpoint, start-up is measured."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "python"


def blox_binary():
    b = os.environ.get("BLOX_BIN") or str(ROOT / "target" / "debug" / "blox")
    if not Path(b).exists():
        pytest.skip(f"no blox binary at {b}: build it first (cargo build) or set BLOX_BIN")
    return b


def run_local(tmp_path, config, jobs):
    (tmp_path / "c.toml").write_text(config)
    (tmp_path / "jobs.toml").write_text(jobs)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PYTHON_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    r = subprocess.run(
        [
            blox_binary(),
            "local",
            str(tmp_path / "c.toml"),
            "--jobs",
            str(tmp_path / "jobs.toml"),
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "out" / "jobs.csv") as f:
        return {row["name"]: row for row in csv.DictReader(f)}


def job_stderr(tmp_path):
    out = ""
    for p in sorted((tmp_path / "work" / "jobs").glob("*/launch-*/stderr")):
        out += p.read_text()
    return out


CONFIG = """
[cluster]
nodes = 1
gpus_per_node = 1
[run]
round_s = 0.5
[scheduling]
policy = "las"
[placement]
policy = "first-free"
"""


def job(name, arrival, steps, startup):
    py = sys.executable.replace("\\\\", "/")
    script = str(Path(__file__).parent / "jobs" / "count.py")
    return f"""
[[job]]
name = "{name}"
arrival_s = {arrival}
gpus = 1
command = ["{py}", "{script}", "--steps", "{steps}", "--startup-s", "{startup}"]
"""


def test_python_jobs_are_preempted_resumed_and_their_start_up_measured(tmp_path):
    jobs = run_local(
        tmp_path,
        CONFIG,
        job("long", 0, 60, 0.6) + job("short", 1.0, 15, 0.6),
    )
    long, short = jobs["long"], jobs["short"]
    assert long["status"] == "finished" and short["status"] == "finished", jobs
    # LAS handed the GPU to the newcomer: the long job was preempted after
    # its protected minimum and resumed from its checkpoint.
    assert int(long["preemptions"]) >= 1, long
    err = job_stderr(tmp_path)
    assert "count.py: revoked at" in err and "count.py: resumed at" in err, err
    # Each launch reported its start-up (0.6 s of sleeping plus the
    # interpreter's own start), kept apart from the productive service.
    launches = int(long["preemptions"]) + 1
    startup = float(long["startup_s"])
    assert 0.6 * launches <= startup < 1.5 * launches, long
    assert int(long["launches_without_progress"]) == 0, long
    # 60 steps of 0.05 s: about 3 s of productive time on one GPU.
    assert 2.9 <= float(long["productive_gpu_seconds"]) < 4.5, long
