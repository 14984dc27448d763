"""The scheduler's API from Python, against a real `blox scheduler` and
`blox worker`: submit, status, cancel, idempotency, and the status codes
`blox.proto` promises."""

import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc", reason="the API client needs grpcio: pip install './python[api]'")
pytest.importorskip("grpc_tools", reason="the API client needs grpcio-tools: pip install './python[api]'")

from blox_client import api  # noqa: E402
from blox_procs import binary, scheduler_and_worker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_proto_is_the_runtime_s():
    assert api.PROTO.read_text() == (ROOT / "blox-runtime" / "proto" / "blox.proto").read_text(), (
        "python/blox_client/proto/blox.proto differs from blox-runtime/proto/blox.proto: copy it"
    )


@pytest.fixture
def cluster(tmp_path):
    """A scheduler on a free port with one worker of 2 logical GPUs."""
    with scheduler_and_worker(tmp_path) as c:
        yield c


def toy(seconds):
    return [binary("blox-toy-job"), "--duration-s", str(seconds), "--iteration-s", "0.02"]


def test_submit_list_cancel_and_wait(cluster):
    c, _ = cluster
    done = c.submit(toy(0.3), gpus=1, name="short", duration_s=0.3)
    assert done >= 1  # job ids start at 1
    long = c.submit(toy(60), gpus=2, name="long")
    infos = c.wait([done], timeout_s=30)
    assert api.phase_name(infos[done]) == "finished"
    assert infos[done].jct_s > 0
    t = time.monotonic()
    while c.job(long).phase != api.pb.JOB_PHASE_RUNNING:
        assert time.monotonic() - t < 20
        time.sleep(0.1)
    c.cancel(long)
    infos = c.wait([long], timeout_s=20)
    assert api.phase_name(infos[long]) == "cancelled"
    assert infos[long].reason == "cancelled" and infos[long].HasField("jct_s")
    names = {j.name for j in c.jobs()}
    assert names == {"short", "long"}
    assert [j.name for j in c.jobs(phases=[api.pb.JOB_PHASE_CANCELLED])] == ["long"]
    page = c.status(limit=1)
    assert len(page.jobs) == 1 and page.next_after_id == page.jobs[0].id and page.total_jobs == 2


def test_a_waiting_job_says_why(cluster):
    c, _ = cluster
    long = c.submit(toy(60), gpus=2, name="long")
    queued = c.submit(toy(0.2), gpus=1, name="queued")
    t = time.monotonic()
    while True:
        infos = {j.id: j for j in c.jobs([long, queued])}
        if infos[long].phase == api.pb.JOB_PHASE_RUNNING and api.wait_reason(infos[queued]):
            break
        assert time.monotonic() - t < 20, infos
        time.sleep(0.1)
    w = infos[queued].wait
    assert (w.kind, w.asked, w.position, w.ordered) == ("waiting-for-gpus", 1, 2, 2)
    assert api.wait_reason(infos[queued]).startswith("waiting for 1 GPU (0 free); `fifo`: 2nd of 2")
    assert api.wait_reason(infos[long]) is None
    c.cancel(long)
    c.cancel(queued)
    c.wait([long, queued], timeout_s=20)


def test_a_queued_job_has_a_predicted_start(cluster):
    c, _ = cluster
    long = c.submit(toy(4), gpus=2, name="long", duration_s=4)
    queued = c.submit(toy(0.5), gpus=2, name="queued", duration_s=0.5)
    t = time.monotonic()
    while True:
        info = c.job(queued)
        if c.job(long).phase == api.pb.JOB_PHASE_RUNNING and api.predicted_start(info):
            break
        assert time.monotonic() - t < 20, info
        time.sleep(0.1)
    now = time.time()
    start, finish = api.predicted_start(info), api.predicted_finish(info)
    # Behind a 4 s job on the same GPUs, for 0.5 s.
    assert now < start < now + 10, (now, start)
    assert abs(finish - start - 0.5) < 1.5, (start, finish)
    assert info.prediction.duration_from == "duration_s" and info.duration_s == 0.5
    assert api.predicted_start(c.job(long)) is None  # it runs
    assert c.status().forecast.stopped
    c.wait([long, queued], timeout_s=30)


def test_a_retried_submission_with_a_key_is_one_job(cluster):
    c, _ = cluster
    first = c.submit(toy(0.2), idempotency_key="exp-42")
    assert c.submit(toy(0.2), idempotency_key="exp-42") == first
    with pytest.raises(grpc.RpcError) as e:
        c.submit(toy(0.5), idempotency_key="exp-42")
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert f"job {first}" in e.value.details()
    assert len(c.jobs()) == 1


def test_bad_requests_get_the_codes_the_proto_lists(cluster, tmp_path):
    c, addr = cluster
    cases = [
        (lambda: c.cancel(0), grpc.StatusCode.INVALID_ARGUMENT, "job_id"),
        (lambda: c.cancel(999), grpc.StatusCode.NOT_FOUND, "999"),
        (lambda: c.status([0]), grpc.StatusCode.INVALID_ARGUMENT, "job_ids"),
        (lambda: c.submit(toy(1), gpus=0), grpc.StatusCode.INVALID_ARGUMENT, "gpus"),
        (lambda: c.submit([], gpus=1), grpc.StatusCode.INVALID_ARGUMENT, "command"),
        (lambda: c.submit(toy(1), gpus=99), grpc.StatusCode.INVALID_ARGUMENT, "gpus"),
    ]
    for call, code, field in cases:
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == code, e.value.details()
        assert field in e.value.details(), e.value.details()
    # A finished job cannot be cancelled.
    j = c.submit(toy(0.1))
    c.wait([j], timeout_s=30)
    with pytest.raises(grpc.RpcError) as e:
        c.cancel(j)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # Without the token.
    with api.Client(addr) as anonymous:
        with pytest.raises(grpc.RpcError) as e:
            anonymous.status()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # With the workers' token: users' calls are refused (and a user's token
    # cannot register a worker).
    with api.Client(addr, token_file=str(tmp_path / "worker-token")) as worker:
        with pytest.raises(grpc.RpcError) as e:
            worker.status()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "users' token" in e.value.details()
    # A name that is not UTF-8: hand-encoded JobSubmission (field 1, name;
    # field 2, command; field 3, gpus) inside SubmitRequest (field 1).
    def field(tag, data):
        n, out = len(data), bytearray([tag])
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out) + data

    sub = field(0x0A, b"\xff\xfe") + field(0x12, toy(1)[0].encode()) + b"\x18\x01"
    raw = field(0x0A, sub)
    call = c.channel.unary_unary(
        "/blox.v1.Scheduler/Submit",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as e:
        call(raw, metadata=c._metadata, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert "JobSubmission.name" in e.value.details(), e.value.details()
    assert len(c.jobs()) == 1
