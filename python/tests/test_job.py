"""The job protocol of blox_client, as the Rust worker reads it."""

import os
import threading
import time

import pytest

import blox_client
from blox_client import ClientError, Job, JobEnv


def env_for(tmp_path, **extra):
    e = {
        "BLOX_JOB_ID": "7",
        "BLOX_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "BLOX_CONTROL_DIR": str(tmp_path / "control"),
    }
    e.update({k: str(v) for k, v in extra.items()})
    return e


def metrics(tmp_path):
    path = tmp_path / "control" / "metrics"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(k, float(v)) for k, v in (line.split(" ") for line in lines)]


def test_the_environment_is_read_and_bad_values_are_named(tmp_path):
    e = env_for(
        tmp_path,
        BLOX_RANK=1,
        BLOX_WORLD_SIZE=2,
        CUDA_VISIBLE_DEVICES="2,3",
        BLOX_RESUME=1,
        BLOX_BATCH_SIZE=128,
        BLOX_LAUNCH_UNIX_S="1700000000.25",
    )
    env = JobEnv.from_env(e)
    assert (env.job_id, env.rank, env.world_size) == (7, 1, 2)
    assert env.devices == ["2", "3"]
    assert env.resume and env.batch_size == 128
    assert env.launch_unix_s == 1700000000.25
    assert env.coord_dir == str(tmp_path / "control")
    with pytest.raises(ClientError, match="BLOX_JOB_ID is not set"):
        JobEnv.from_env({})
    with pytest.raises(ClientError, match="BLOX_JOB_ID = `x`"):
        JobEnv.from_env(env_for(tmp_path, BLOX_JOB_ID="x"))
    with pytest.raises(ClientError, match="BLOX_LAUNCH_UNIX_S"):
        JobEnv.from_env(env_for(tmp_path, BLOX_LAUNCH_UNIX_S="nan"))
    with pytest.raises(ClientError, match="BLOX_RANK"):
        JobEnv.from_env(env_for(tmp_path, BLOX_RANK="-1"))


def test_a_share_of_a_gpu_is_read_from_the_environment(tmp_path):
    assert JobEnv.from_env(env_for(tmp_path)).gpu_milli is None
    env = JobEnv.from_env(env_for(tmp_path, BLOX_GPU_MILLI="460"))
    assert env.gpu_milli == 460
    with pytest.raises(ClientError, match="BLOX_GPU_MILLI"):
        JobEnv.from_env(env_for(tmp_path, BLOX_GPU_MILLI="half"))


def test_iteration_stops_at_the_first_boundary_after_a_revocation(tmp_path):
    job = Job.from_env(env_for(tmp_path))
    seen = []
    it = job.iterate(range(100))
    for i in it:
        seen.append(i)
        if i == 4:
            (tmp_path / "control" / "revoked").touch()
    assert seen == [0, 1, 2, 3, 4]
    assert it.revoked and job.lease_revoked()
    # An iterator that ran out was not revoked.
    job2 = Job.from_env(env_for(tmp_path / "b"))
    it2 = job2.iterate(range(3))
    assert list(it2) == [0, 1, 2] and not it2.revoked


def test_a_lease_the_worker_stopped_renewing_stops_the_job(tmp_path):
    job = Job.from_env(env_for(tmp_path))
    lease = tmp_path / "control" / blox_client.LEASE_FILE
    now = time.monotonic()
    # A long grace: the watchdog must not end the test process.
    lease.write_text(f"{now + 0.3} 3600")
    it = job.iterate(range(10**6))
    assert next(it) == 0 and not job.lease_expired()
    time.sleep(0.35)
    lease.write_text(f"{now + 0.8} 3600")  # renewed
    assert next(it) == 1
    time.sleep(0.5)  # not renewed
    with pytest.raises(StopIteration):
        next(it)
    assert it.revoked
    # A damaged lease file holds; bad graces are not leases.
    lease.write_text("soon")
    assert blox_client.read_lease(str(lease)) is None
    assert not Job.from_env(env_for(tmp_path)).lease_revoked()
    lease.write_text("5 -1")
    assert blox_client.read_lease(str(lease)) is None


def test_a_job_whose_lease_and_grace_ran_out_exits_on_its_own(tmp_path):
    import subprocess
    import sys

    (tmp_path / "control").mkdir()
    lease = tmp_path / "control" / blox_client.LEASE_FILE
    lease.write_text(f"{time.monotonic() - 1} 0.1")
    # A job stuck in one long step (it never reaches a boundary).
    code = (
        "import time, blox_client; j = blox_client.Job.from_env(); "
        "time.sleep(30); print('still running')"
    )
    env = dict(os.environ, **env_for(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(blox_client.__file__))]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == blox_client.LEASE_LOST_EXIT, r
    assert "lease ran out" in r.stderr and "still running" not in r.stdout
    assert time.monotonic() - t < 10


def test_start_up_is_reported_once_at_the_first_boundary(tmp_path):
    launched = time.time() - 2.5
    job = Job.from_env(env_for(tmp_path, BLOX_LAUNCH_UNIX_S=f"{launched:.3f}"))
    assert metrics(tmp_path) == []
    it = job.iterate(range(3))
    next(it)
    m = metrics(tmp_path)
    assert [k for k, _ in m] == [blox_client.STARTUP_METRIC]
    assert 2.4 <= m[0][1] < 10.0
    list(it)
    assert job.report_started() is None
    assert [k for k, _ in metrics(tmp_path)] == ["startup_s"]


def test_a_saved_checkpoint_is_reported_by_rank_0_with_its_time(tmp_path):
    launched = time.time() - 4.0
    job = Job.from_env(env_for(tmp_path, BLOX_LAUNCH_UNIX_S=f"{launched:.3f}"))
    job.save_checkpoint("state", b"1")
    m = metrics(tmp_path)
    assert [k for k, _ in m] == [blox_client.CHECKPOINT_METRIC]
    assert 3.9 <= m[0][1] < 30.0
    other = tmp_path / "r1"
    Job.from_env(
        env_for(other, BLOX_RANK=1, BLOX_WORLD_SIZE=2, BLOX_LAUNCH_UNIX_S=f"{launched:.3f}")
    ).save_checkpoint("state", b"1")
    assert metrics(other) == []


def test_only_rank_0_reports_start_up_and_without_a_launch_time_it_is_0(tmp_path):
    Job.from_env(env_for(tmp_path, BLOX_RANK=1, BLOX_WORLD_SIZE=2)).report_started()
    assert metrics(tmp_path) == []
    Job.from_env(env_for(tmp_path)).report_started()
    assert metrics(tmp_path) == [("startup_s", 0.0)]


def test_metrics_are_lines_the_worker_parses_and_bad_ones_are_refused(tmp_path):
    job = Job.from_env(env_for(tmp_path))
    job.push_metric("loss", 0.125)
    job.push_metric("tiny", 1e-12)
    job.progress(1.7)
    assert metrics(tmp_path) == [("loss", 0.125), ("tiny", 1e-12), ("progress", 1.0)]
    for key in ["", "two words", "tab\tkey"]:
        with pytest.raises(ClientError, match="no whitespace"):
            job.push_metric(key, 1)
    with pytest.raises(ClientError, match="finite"):
        job.push_metric("loss", float("nan"))


def test_concurrent_writers_never_interleave_lines(tmp_path):
    job = Job.from_env(env_for(tmp_path))

    def push(k):
        for i in range(200):
            job.push_metric(f"k{k}", i)

    threads = [threading.Thread(target=push, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = metrics(tmp_path)
    assert len(m) == 800
    for k in range(4):
        assert [v for key, v in m if key == f"k{k}"] == list(range(200))


def test_checkpoints_are_atomic_per_rank_and_restored_only_when_resuming(tmp_path):
    first = Job.from_env(env_for(tmp_path))
    first.save_checkpoint("state", b"step 40")
    assert first.load_checkpoint("state") is None  # not resuming
    assert not (tmp_path / "ckpt" / "state.tmp").exists()
    resumed = Job.from_env(env_for(tmp_path, BLOX_RESUME=1))
    assert resumed.load_checkpoint("state") == b"step 40"
    assert resumed.load_checkpoint("other") is None
    rank1 = Job.from_env(env_for(tmp_path, BLOX_RANK=1, BLOX_WORLD_SIZE=2, BLOX_RESUME=1))
    rank1.save_checkpoint("state", b"rank 1")
    assert (tmp_path / "ckpt" / "state.rank1").read_bytes() == b"rank 1"
    assert rank1.load_checkpoint("state") == b"rank 1"
    assert resumed.load_checkpoint("state") == b"step 40"
    with pytest.raises(ClientError, match="plain file name"):
        first.save_checkpoint("../escape", b"")


def test_a_stale_launch_cannot_replace_a_newer_launchs_checkpoint(tmp_path):
    def launch(g):
        return Job.from_env(env_for(tmp_path, BLOX_RESUME=1, BLOX_GENERATION=g))

    old, new = launch(5), launch(9)
    old.save_checkpoint("state", b"old-40")
    assert new.load_checkpoint("state") == b"old-40"
    new.save_checkpoint("state", b"new-45")
    # The old launch, cut off from the scheduler but still running, writes later.
    old.save_checkpoint("state", b"old-50")
    assert launch(12).load_checkpoint("state") == b"new-45"
    assert old.load_checkpoint("state") == b"old-50"  # its own lineage only
    launch(12).save_checkpoint("state", b"newest")
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["state.gen-12"]
    # Rust and Python jobs share the layout: a plain file is generation 0.
    (tmp_path / "ckpt" / "other").write_bytes(b"plain")
    assert launch(3).load_checkpoint("other") == b"plain"
    with pytest.raises(ClientError, match="BLOX_GENERATION"):
        JobEnv.from_env(env_for(tmp_path, BLOX_GENERATION=-1))


def test_a_new_batch_size_applies_once(tmp_path):
    job = Job.from_env(env_for(tmp_path, BLOX_BATCH_SIZE=64))
    assert job.batch_size == 64 and job.new_batch_size() is None
    (tmp_path / "control" / "batch_size").write_text("256\n")
    assert job.new_batch_size() == 256
    job.applied_batch_size(256)
    assert job.new_batch_size() is None and job.batch_size == 256
    (tmp_path / "control" / "batch_size").write_text("garbage")
    assert job.new_batch_size() is None


def test_finish_writes_done(tmp_path):
    job = Job.from_env(env_for(tmp_path))
    job.finish()
    assert (tmp_path / "control" / "done").exists()


@pytest.mark.parametrize("revoked_at", [0, 3, 17])
def test_ranks_stop_at_the_same_boundary_after_a_revocation(tmp_path, revoked_at):
    # Four ranks share a coordination directory. Each tick every rank runs
    # one iteration, in a different order each tick (ranks of a real job are
    # within one iteration of each other between collectives); the lease is
    # revoked in the middle of a tick, so some ranks see it one boundary
    # before the others. All stop after the same iteration.
    coord = tmp_path / "coord"
    coord.mkdir()
    jobs = [
        Job.from_env(
            env_for(tmp_path, BLOX_RANK=r, BLOX_WORLD_SIZE=4, BLOX_COORD_DIR=str(coord))
        )
        for r in range(4)
    ]
    iters = [j.iterate(range(1000)) for j in jobs]
    counts = [0] * 4
    live = set(range(4))
    tick = 0
    while live:
        order = [(r + tick) % 4 for r in range(4)]
        for n, r in enumerate(order):
            if r in live:
                try:
                    next(iters[r])
                    counts[r] += 1
                except StopIteration:
                    live.discard(r)
            if tick == revoked_at and n == 1:
                (tmp_path / "control" / "revoked").touch()
        tick += 1
        assert tick < 100, counts
    assert all(it.revoked for it in iters)
    assert len(set(counts)) == 1, counts
    assert int((coord / "exit_at").read_text()) == counts[0]
    assert not [p for p in os.listdir(coord) if p.startswith("exit_at.rank")]
