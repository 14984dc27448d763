"""A client of the blox scheduler's gRPC API (``blox.proto``): submit, list,
cancel and wait for jobs from Python.

Needs ``pip install './python[api]'`` (grpcio, protobuf, grpcio-tools). The
message classes and stubs are generated from the ``blox.proto`` shipped with
this package the first time this module is imported (into a cache directory:
``$BLOX_CLIENT_CACHE``, else ``~/.cache/blox-client``), so they always match
it.

    from blox_client.api import Client, phase_name
    c = Client("127.0.0.1:50051", token_file="token")
    job = c.submit(["python3", "train.py"], gpus=1, name="resnet",
                   idempotency_key="resnet-2026-11-23")
    c.wait([job])
    info = c.job(job)
    print(phase_name(info), info.jct_s)

Errors are ``grpc.RpcError`` with the status codes ``blox.proto`` lists
(``e.code()``, ``e.details()`` naming the field).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import grpc

__all__ = [
    "Client",
    "pb",
    "PROTO",
    "load_stubs",
    "phase_name",
    "wait_reason",
    "predicted_start",
    "predicted_finish",
]

#: The protocol this client speaks (a copy of blox-runtime/proto/blox.proto).
PROTO = Path(__file__).with_name("proto") / "blox.proto"


def _cache_dir() -> Path:
    base = os.environ.get("BLOX_CLIENT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "blox-client"
    )
    digest = hashlib.sha256(PROTO.read_bytes()).hexdigest()[:16]
    return Path(base) / digest


def load_stubs():
    """Generates (once) and imports ``blox_pb2`` and ``blox_pb2_grpc``."""
    out = _cache_dir()
    if not (out / "blox_pb2_grpc.py").exists():
        from grpc_tools import protoc

        out.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        include = Path(protoc.__file__).parent / "_proto"
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO.parent}",
                f"-I{include}",
                f"--python_out={tmp}",
                f"--grpc_python_out={tmp}",
                str(PROTO),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {rc})")
        for f in tmp.iterdir():
            os.replace(f, out / f.name)
        tmp.rmdir()
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return importlib.import_module("blox_pb2"), importlib.import_module("blox_pb2_grpc")


pb, _grpc = load_stubs()


class Client:
    """A connection to one scheduler."""

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        root_certificates: Optional[bytes] = None,
        timeout_s: float = 30.0,
    ) -> None:
        if token_file is not None:
            with open(token_file) as f:
                token = f.readline().strip()
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self.timeout_s = timeout_s
        if root_certificates is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self.channel = grpc.secure_channel(address, creds)
        else:
            self.channel = grpc.insecure_channel(address)
        self.stub = _grpc.SchedulerStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request):
        return method(request, metadata=self._metadata, timeout=self.timeout_s)

    def submit(
        self,
        command: Sequence[str],
        gpus: int = 1,
        name: str = "",
        duration_s: Optional[float] = None,
        batch_size: Optional[int] = None,
        user: Optional[str] = None,
        model: Optional[str] = None,
        metrics: Optional[Dict[str, float]] = None,
        idempotency_key: str = "",
        team: Optional[str] = None,
    ) -> int:
        """Submits a job (its argv, run without a shell); returns its id.
        With an ``idempotency_key``, a retry returns the first job's id."""
        job = pb.JobSubmission(
            name=name,
            command=list(command),
            gpus=gpus,
            metrics=metrics or {},
            idempotency_key=idempotency_key,
        )
        if duration_s is not None:
            job.duration_s = duration_s
        if batch_size is not None:
            job.batch_size = batch_size
        if user is not None:
            job.user = user
        if model is not None:
            job.model = model
        if team is not None:
            job.team = team
        return self._call(self.stub.Submit, pb.SubmitRequest(job=job)).job_id

    def status(
        self,
        job_ids: Iterable[int] = (),
        phases: Iterable[int] = (),
        limit: int = 0,
        after_id: int = 0,
    ) -> "pb.StatusReply":
        """One ``Status`` call: the named jobs, or a page of all jobs (ids
        above ``after_id``, in ``phases`` if given, at most ``limit``), and
        every worker. ``reply.next_after_id`` is non-zero when more follow."""
        req = pb.StatusRequest(job_ids=list(job_ids), phases=list(phases), limit=limit, after_id=after_id)
        return self._call(self.stub.Status, req)

    def jobs(self, job_ids: Iterable[int] = (), phases: Iterable[int] = ()) -> List["pb.JobInfo"]:
        """The named jobs, or every job (in ``phases`` if given), all pages."""
        ids = list(job_ids)
        reply = self.status(ids, phases)
        out = list(reply.jobs)
        while not ids and reply.next_after_id:
            reply = self.status((), phases, after_id=reply.next_after_id)
            out.extend(reply.jobs)
        return out

    def job(self, job_id: int) -> "pb.JobInfo":
        return self.status([job_id]).jobs[0]

    def cancel(self, job_id: int) -> None:
        """Stops the job; it ends with phase CANCELLED."""
        self._call(self.stub.Cancel, pb.CancelRequest(job_id=job_id))

    def wait(self, job_ids: Iterable[int], timeout_s: float = 3600.0, poll_s: float = 0.2):
        """Waits until every named job ended; returns their ``JobInfo`` by id."""
        ids = list(job_ids)
        ended = {
            pb.JOB_PHASE_FINISHED,
            pb.JOB_PHASE_FAILED,
            pb.JOB_PHASE_REJECTED,
            pb.JOB_PHASE_CANCELLED,
        }
        deadline = time.monotonic() + timeout_s
        while True:
            infos = self.jobs(ids)
            if all(j.phase in ended for j in infos):
                return {j.id: j for j in infos}
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "jobs still running: "
                    + ", ".join(f"{j.id} ({pb.JobPhase.Name(j.phase)})" for j in infos if j.phase not in ended)
                )
            time.sleep(poll_s)


def phase_name(info: "pb.JobInfo") -> str:
    """``finished``, ``cancelled``, ... for a ``JobInfo``."""
    return pb.JobPhase.Name(info.phase).removeprefix("JOB_PHASE_").lower()


def wait_reason(info: "pb.JobInfo") -> Optional[str]:
    """Why the job waits, in words (``info.wait`` has it typed: ``kind``,
    ``asked``, ``position``), or ``None`` while it runs or once it ended."""
    return info.wait.reason if info.HasField("wait") else None


def predicted_start(info: "pb.JobInfo") -> Optional[float]:
    """When the scheduler's latest forecast says the job gets GPUs (Unix
    seconds), or ``None``: it runs now, ended, was not forecast yet, or does
    not start within the forecast's reach (``blox status --start``)."""
    if not info.HasField("prediction") or not info.prediction.HasField("start_unix_s"):
        return None
    return info.prediction.start_unix_s


def predicted_finish(info: "pb.JobInfo") -> Optional[float]:
    """When the latest forecast says the job finishes (Unix seconds), or
    ``None`` (not within reach, or its run time is unknown)."""
    if not info.HasField("prediction") or not info.prediction.HasField("finish_unix_s"):
        return None
    return info.prediction.finish_unix_s
