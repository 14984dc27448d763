"""On a real NVIDIA GPU: the worker finds it through NVML, and two PyTorch
jobs (examples/python/train.py) share it under LAS: each sees the GPU in
CUDA_VISIBLE_DEVICES and trains on CUDA, one is preempted, checkpoints, and
resumes from its checkpoint. Skipped with a message where there is no GPU or
no torch with CUDA."""

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: no GPU test")
pytest.importorskip("grpc", reason="the API client needs grpcio")
if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
    pytest.skip("no NVIDIA GPU here (nvidia-smi -L fails): GPU test skipped", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("torch has no CUDA here: GPU test skipped", allow_module_level=True)

from blox_procs import ROOT, job_stderr, scheduler_and_worker  # noqa: E402


def train(steps):
    return [
        sys.executable,
        str(ROOT / "examples" / "python" / "train.py"),
        "--steps",
        str(steps),
        "--step-sleep-s",
        "0.01",
        "--checkpoint-every",
        "50",
    ]


def test_pytorch_jobs_share_a_real_gpu_with_preemption_and_resume(tmp_path):
    with scheduler_and_worker(tmp_path, policy="las", round_s=2.0, gpus=None) as (c, _):
        workers = c.status().workers
        names = [g.name for w in workers for g in w.gpus]
        assert names and all("NVIDIA" in n for n in names), names
        first = c.submit(train(1500), gpus=1, name="first")
        time.sleep(12)
        second = c.submit(train(300), gpus=1, name="second")
        infos = c.wait([first, second], timeout_s=540)
        err = job_stderr(tmp_path / "worker")
        for j in infos.values():
            assert j.phase == 4, (j, err)  # FINISHED
        # Each launch trained on CUDA, on the one GPU CUDA_VISIBLE_DEVICES named.
        assert re.search(r"starting on cuda \(\['\d+'\]\)", err), err
        if len(names) == 1:
            # One GPU: LAS preempted the first job for the second.
            assert infos[first].preemptions >= 1, infos[first]
            assert "resumed at step" in err, err
        # Start-up (importing torch, initialising CUDA) was measured.
        assert infos[first].startup_s > 0.5, infos[first]
        print(f"GPUs {names}; first: {infos[first].launches} launches, start-up "
              f"{infos[first].startup_s:.1f} s, JCT {infos[first].jct_s:.1f} s; "
              f"second: JCT {infos[second].jct_s:.1f} s", file=sys.stderr)
