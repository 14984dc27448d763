"""A real `blox scheduler` and `blox worker`, as processes, for the tests."""

import re
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def binary(name):
    b = ROOT / "target" / "debug" / name
    if not b.exists():
        pytest.skip(f"no {b}: build it first (cargo build)")
    return str(b)


@contextmanager
def scheduler_and_worker(tmp_path, policy="fifo", round_s=0.5, gpus=2):
    """Yields (client, address): a scheduler on a free port with a shared
    token and one worker, of `gpus` logical GPUs, or its real GPUs (NVML)
    when `gpus` is None. Both are stopped at the end."""
    from blox_client import api

    for name, text in (("token", "py-token\n"), ("worker-token", "py-worker-token\n")):
        (tmp_path / name).write_text(text)
        # A token file readable by others is refused (as ssh refuses keys).
        (tmp_path / name).chmod(0o600)
    (tmp_path / "s.toml").write_text(
        f"""
[run]
round_s = {round_s}
[scheduling]
policy = "{policy}"
[placement]
policy = "consolidated"
[runtime]
listen = "127.0.0.1:0"
state = "state.redb"
checkpoint_dir = "checkpoints"
token_file = "token"
worker_token_file = "worker-token"
heartbeat_s = 0.2
worker_timeout_s = 3
"""
    )
    procs = []
    try:
        s = subprocess.Popen(
            [binary("blox"), "scheduler", "--config", str(tmp_path / "s.toml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(s)
        seen = []
        m = None
        while m is None and len(seen) < 50:
            line = s.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"listening on (\S+)", line)
        assert m, "".join(seen)
        addr = m.group(1)
        args = [
            binary("blox"),
            "worker",
            "--scheduler",
            addr,
            "--token-file",
            str(tmp_path / "worker-token"),
            "--workdir",
            str(tmp_path / "worker"),
            # Tests run as root in CI: jobs may run as the worker's user.
            "--allow-root-jobs",
        ]
        if gpus is not None:
            args += ["--gpus", str(gpus)]
        procs.append(
            subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "w"))
        )
        c = api.Client(addr, token_file=str(tmp_path / "token"))
        t = time.monotonic()
        while not any(w.alive for w in c.status().workers):
            assert time.monotonic() - t < 20, (tmp_path / "worker.log").read_text()
            time.sleep(0.1)
        time.sleep(2 * round_s + 0.5)  # its GPUs join the loop's cluster
        yield c, addr
        c.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def job_stderr(workdir):
    """Every launch's stderr under a worker's (or `blox local`'s) workdir."""
    return "".join(p.read_text() for p in sorted(Path(workdir).glob("jobs/*/*/launch-*/stderr*")))
