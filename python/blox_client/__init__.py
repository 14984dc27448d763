"""The job side of the blox runtime, for Python training jobs.

The same protocol as the Rust crate ``blox-client`` (``docs/RUNTIME.md``).
The worker writes a per-launch *control directory* (``BLOX_CONTROL_DIR``)
that the job only reads; the job writes its *report directory*
(``BLOX_REPORT_DIR``, its working and home directory) that the worker only
reads (where it is unset, an older worker: the control directory).

In the report directory:

- ``metrics`` is an append-only log of ``key value`` lines (``progress`` is
  the share of work done, 0-1; ``startup_s`` the launch's start-up);
- ``done`` is written by :meth:`Job.finish` when the job completed its work.

In the coordination directory (``BLOX_COORD_DIR``, else the report
directory): ``exit_at`` fixes, for a job with several ranks, the boundary
where every rank stops after a revocation (two-phase revocation, Blox
section 7).

In the control directory:

- ``revoked`` appears when the lease is revoked: checkpoint and exit with
  status 0 at the next iteration boundary;
- ``batch_size`` holds a new global batch size to apply at the next boundary;
- ``lease`` holds until when the lease holds and the grace after it
  (``<until_s> <grace_s>``, seconds of the node's monotonic clock), renewed
  by the worker at every heartbeat the scheduler acknowledges. A lease that
  ran out counts as revoked, and past the grace a watchdog thread ends the
  process (exit status 75): a job stops itself even when its worker hangs.
  No ``lease`` file: the lease holds until revoked.

Nothing here talks to the scheduler: a lease check is one ``stat``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Mapping, Optional, Tuple, TypeVar

__all__ = [
    "ENV",
    "STARTUP_METRIC",
    "CHECKPOINT_METRIC",
    "ClientError",
    "JobEnv",
    "Job",
    "LeaseIter",
    "LEASE_FILE",
    "LEASE_LOST_EXIT",
    "read_lease",
]

#: Names of the environment variables a worker sets for a job.
ENV = {
    "job_id": "BLOX_JOB_ID",
    "rank": "BLOX_RANK",
    "world_size": "BLOX_WORLD_SIZE",
    "visible_devices": "CUDA_VISIBLE_DEVICES",
    "master_addr": "BLOX_MASTER_ADDR",
    "worker_addr": "BLOX_WORKER_ADDR",
    "checkpoint_dir": "BLOX_CHECKPOINT_DIR",
    "control_dir": "BLOX_CONTROL_DIR",
    "report_dir": "BLOX_REPORT_DIR",
    "coord_dir": "BLOX_COORD_DIR",
    "resume": "BLOX_RESUME",
    "batch_size": "BLOX_BATCH_SIZE",
    "launch_unix_s": "BLOX_LAUNCH_UNIX_S",
    "generation": "BLOX_GENERATION",
    "gpu_milli": "BLOX_GPU_MILLI",
}

#: The metric a job pushes once per launch at its first iteration boundary:
#: seconds from its launch to there. The scheduler does not preempt a launch
#: before it has reported it (up to ``[run] max_startup_s``) and then run
#: ``[run] min_run_s`` more.
STARTUP_METRIC = "startup_s"

#: The metric :meth:`Job.save_checkpoint` pushes (rank 0): seconds from the
#: launch to the checkpoint just saved. A job that saves only every so often
#: (``checkpoint_interval_s``) then loses, when stopped, only the work since.
CHECKPOINT_METRIC = "checkpoint_s"

T = TypeVar("T")


class ClientError(Exception):
    """The environment or the control directory cannot be used."""


@dataclass
class JobEnv:
    """A job's view of its launch, from the environment the worker set."""

    job_id: int
    checkpoint_dir: str
    control_dir: str
    rank: int = 0
    world_size: int = 1
    devices: Optional[List[str]] = None
    master_addr: Optional[str] = None
    worker_addr: Optional[str] = None
    coord_dir: Optional[str] = None
    #: Where the job writes ``metrics`` and ``done`` (default: the control
    #: directory, as an older worker has it).
    report_dir: Optional[str] = None
    resume: bool = False
    batch_size: Optional[int] = None
    launch_unix_s: Optional[float] = None
    #: Larger for every later launch of the job (0: unknown). Checkpoints are
    #: written per generation and the newest is restored, so a launch whose
    #: worker lost its lease cannot overwrite a newer launch's checkpoint.
    generation: int = 0
    #: Thousandths of its one GPU when it shares the GPU with other jobs
    #: (``BLOX_GPU_MILLI``; CUDA MPS's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
    #: and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` say the same); None: whole GPUs.
    gpu_milli: Optional[int] = None

    def __post_init__(self) -> None:
        if self.devices is None:
            self.devices = []
        if not self.report_dir:
            self.report_dir = self.control_dir
        if not self.coord_dir:
            self.coord_dir = self.report_dir

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "JobEnv":
        """Reads ``environ`` (default: this process's environment)."""
        env = os.environ if environ is None else environ

        def need(key: str) -> str:
            name = ENV[key]
            v = env.get(name)
            if v is None:
                raise ClientError(
                    f"environment variable {name} is not set "
                    "(is this job running under a blox worker?)"
                )
            return v

        def num(key: str, v: str, parse: Callable[[str], T] = int) -> T:
            try:
                x = parse(v.strip())
            except ValueError as e:
                raise ClientError(f"environment variable {ENV[key]} = `{v}`: {e}") from None
            if isinstance(x, float) and not (math.isfinite(x) and x >= 0):
                raise ClientError(f"environment variable {ENV[key]} = `{v}`: expected a non-negative number")
            if isinstance(x, int) and x < 0:
                raise ClientError(f"environment variable {ENV[key]} = `{v}`: expected a non-negative integer")
            return x

        def opt(key: str) -> Optional[str]:
            v = env.get(ENV[key])
            return v if v else None

        devices = [d for d in env.get(ENV["visible_devices"], "").split(",") if d]
        rank = opt("rank")
        world = opt("world_size")
        batch = opt("batch_size")
        launched = opt("launch_unix_s")
        generation = opt("generation")
        milli = opt("gpu_milli")
        return cls(
            job_id=num("job_id", need("job_id")),
            checkpoint_dir=need("checkpoint_dir"),
            control_dir=need("control_dir"),
            rank=num("rank", rank) if rank is not None else 0,
            world_size=num("world_size", world) if world is not None else 1,
            devices=devices,
            master_addr=opt("master_addr"),
            worker_addr=opt("worker_addr"),
            coord_dir=opt("coord_dir"),
            report_dir=opt("report_dir"),
            resume=env.get(ENV["resume"], "") in ("1", "true"),
            batch_size=num("batch_size", batch) if batch is not None else None,
            launch_unix_s=num("launch_unix_s", launched, float) if launched is not None else None,
            generation=num("generation", generation) if generation is not None else 0,
            gpu_milli=num("gpu_milli", milli) if milli is not None else None,
        )


LEASE_FILE = "lease"
"""The control directory's lease file (see the module's docs)."""

LEASE_LOST_EXIT = 75
"""Exit status of a job whose lease ran out past its grace (``EX_TEMPFAIL``)."""


def read_lease(path: str) -> Optional[Tuple[float, float]]:
    """A lease file's ``(until_s, grace_s)``, or None if it holds no valid one."""
    try:
        with open(path) as f:
            parts = f.read().split()
        until = float(parts[0])
        grace = float(parts[1]) if len(parts) > 1 else 0.0
    except (OSError, ValueError, IndexError):
        return None
    if not (math.isfinite(until) and math.isfinite(grace) and grace >= 0.0):
        return None
    return until, grace


def _watchdog(path: str, stop: threading.Event) -> None:
    """Ends the process once the lease ran out more than its grace ago: a job
    stuck in a long step must not run on beside its relaunch elsewhere."""
    while not stop.wait(0.2):
        lease = read_lease(path)
        if lease is None:
            continue
        now = time.monotonic()
        if now >= lease[0] + lease[1]:
            os.write(
                2,
                f"blox: the lease ran out {now - lease[0]:.1f} s ago and its "
                f"{lease[1]:.1f} s grace is over (the worker could not reach the "
                "scheduler): exiting\n".encode(),
            )
            os._exit(LEASE_LOST_EXIT)


class Job:
    """The running job: lease checks, metrics, checkpoints, start-up."""

    def __init__(self, env: JobEnv) -> None:
        self.env = env
        try:
            os.makedirs(env.checkpoint_dir, exist_ok=True)
            os.makedirs(env.report_dir, exist_ok=True)
        except OSError as e:
            raise ClientError(f"{e.filename}: {e.strerror}") from None
        self._revoked = os.path.join(env.control_dir, "revoked")
        self._lease = os.path.join(env.control_dir, LEASE_FILE)
        self._lease_until: Optional[float] = None
        self._watchdog_stop = threading.Event()
        threading.Thread(
            target=_watchdog, args=(self._lease, self._watchdog_stop), name="blox-lease", daemon=True
        ).start()
        self._batch_file = os.path.join(env.control_dir, "batch_size")
        self._metrics_path = os.path.join(env.report_dir, "metrics")
        self._batch = env.batch_size
        self._started = False

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Job":
        """Attaches to the worker's control directory named in the environment."""
        return cls(JobEnv.from_env(environ))

    # --- the lease -------------------------------------------------------

    def lease_revoked(self) -> bool:
        """True once the worker revoked the lease, or the lease ran out (the
        worker could not renew it): checkpoint and exit (status 0)."""
        return os.path.exists(self._revoked) or self.lease_expired()

    def lease_expired(self) -> bool:
        """True once the worker's lease file says the lease ran out (one
        clock read while the last end read is ahead)."""
        now = time.monotonic()
        if self._lease_until is not None and now < self._lease_until:
            return False
        lease = read_lease(self._lease)
        if lease is None:
            return False
        self._lease_until = lease[0]
        return now >= lease[0]

    def __del__(self) -> None:
        stop = getattr(self, "_watchdog_stop", None)
        if stop is not None:
            stop.set()

    def iterate(self, iterable: Iterable[T]) -> "LeaseIter[T]":
        """Yields from ``iterable`` while the lease holds; stops at the first
        boundary after a revocation (then ``.revoked`` is True). Reports the
        start-up before the first iteration."""
        return LeaseIter(self, iterable)

    # --- batch size --------------------------------------------------------

    @property
    def batch_size(self) -> Optional[int]:
        """The global batch size in use (the launch's, then the last applied)."""
        return self._batch

    def new_batch_size(self) -> Optional[int]:
        """A new global batch size to apply now, if the scheduler sent one."""
        try:
            with open(self._batch_file) as f:
                b = int(f.read().strip())
        except (OSError, ValueError):
            return None
        return b if b != self._batch else None

    def applied_batch_size(self, b: int) -> None:
        """Records that the batch size in use is now ``b``."""
        self._batch = int(b)

    # --- metrics -----------------------------------------------------------

    def push_metric(self, key: str, value: float) -> None:
        """Appends one metric to the worker's log (read every 20 ms)."""
        if not key or any(c.isspace() for c in key):
            raise ClientError(f"metric key `{key}`: keys are non-empty and have no whitespace")
        v = float(value)
        if not math.isfinite(v):
            raise ClientError(f"metric `{key}`: {value!r} is not a finite number")
        # One write of a whole line, in append mode: lines never interleave.
        with open(self._metrics_path, "a") as f:
            f.write(f"{key} {v!r}\n")

    def progress(self, fraction: float) -> None:
        """Reports the share of the work done (0-1)."""
        self.push_metric("progress", min(1.0, max(0.0, float(fraction))))

    # --- start-up ----------------------------------------------------------

    def startup_so_far(self) -> Optional[float]:
        """Seconds since the worker started this process, if it said when."""
        if self.env.launch_unix_s is None:
            return None
        return max(0.0, time.time() - self.env.launch_unix_s)

    def report_started(self) -> Optional[float]:
        """Reports that start-up is over (the job is at its first iteration
        boundary): pushes ``startup_s`` once per launch, from rank 0. Later
        calls do nothing. :meth:`iterate` calls it; a job that does not
        iterate through it calls it itself. Returns the start-up."""
        if self._started:
            return None
        self._started = True
        startup = self.startup_so_far() or 0.0
        if self.env.rank == 0:
            self.push_metric(STARTUP_METRIC, startup)
        return startup

    # --- checkpoints -------------------------------------------------------

    def checkpoint_path(self, name: str) -> str:
        """The checkpoint file ``name`` of this job (rank-specific for rank > 0)."""
        if os.sep in name or name in ("", ".", ".."):
            raise ClientError(f"checkpoint name `{name}`: a plain file name")
        if self.env.rank == 0:
            return os.path.join(self.env.checkpoint_dir, name)
        return os.path.join(self.env.checkpoint_dir, f"{name}.rank{self.env.rank}")

    def _generations(self, name: str) -> List[Tuple[int, str]]:
        """The files of checkpoint ``name``: the plain one (generation 0) and
        every ``<name>.gen-<G>``, with their generations."""
        base = self.checkpoint_path(name)
        out: List[Tuple[int, str]] = []
        if os.path.isfile(base):
            out.append((0, base))
        prefix = os.path.basename(base) + ".gen-"
        try:
            entries = os.listdir(os.path.dirname(base))
        except OSError:
            return out
        for e in entries:
            if e.startswith(prefix) and e[len(prefix):].isdigit():
                out.append((int(e[len(prefix):]), os.path.join(os.path.dirname(base), e)))
        return out

    def save_checkpoint(self, name: str, data: bytes) -> None:
        """Saves ``data`` as checkpoint ``name`` atomically: a reader sees the
        old checkpoint or the new one, never a torn file.

        With a generation (every launch by a blox worker has one) the file is
        ``<name>[.rank<r>].gen-<G>`` and older generations' files are removed
        once it is in place: a stale launch still writing (its worker cut off
        from the scheduler) never replaces a newer launch's checkpoint, since
        :meth:`load_checkpoint` restores the newest."""
        base = self.checkpoint_path(name)
        g = self.env.generation
        path = base if g == 0 else f"{base}.gen-{g}"
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise ClientError(f"{path}: {e.strerror}") from None
        if g > 0:
            for older, p in self._generations(name):
                if older < g:
                    try:
                        os.remove(p)
                    except OSError:
                        pass
        at = self.startup_so_far()
        if at is not None and self.env.rank == 0:
            self.push_metric(CHECKPOINT_METRIC, at)

    def load_checkpoint(self, name: str) -> Optional[bytes]:
        """Checkpoint ``name`` from an earlier launch, if resuming and one
        exists: the newest generation up to this launch's (any without one)."""
        if not self.env.resume:
            return None
        g = self.env.generation
        found = sorted(
            (k, p) for k, p in self._generations(name) if g == 0 or k <= g
        )
        for _, p in reversed(found):
            try:
                with open(p, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                continue
        return None

    # --- the end -----------------------------------------------------------

    def finish(self) -> None:
        """Tells the worker the job completed its work (then exit with status 0)."""
        path = os.path.join(self.env.report_dir, "done")
        try:
            with open(path, "wb"):
                pass
        except OSError as e:
            raise ClientError(f"{path}: {e.strerror}") from None

    # --- two-phase revocation ------------------------------------------------

    def _exit_at(self) -> Optional[int]:
        try:
            with open(os.path.join(self.env.coord_dir, "exit_at")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def _propose_exit_at(self, step: int) -> Optional[int]:
        """Proposes ``step`` as the exit boundary; the first proposal wins
        (a private file, hard-linked into place atomically)."""
        d = self.env.coord_dir
        tmp = os.path.join(d, f"exit_at.rank{self.env.rank}")
        try:
            with open(tmp, "w") as f:
                f.write(str(step))
            try:
                os.link(tmp, os.path.join(d, "exit_at"))
            except FileExistsError:
                pass
            finally:
                os.remove(tmp)
        except OSError:
            pass
        return self._exit_at()


class LeaseIter(Iterator[T]):
    """An iterator that ends at the first boundary after the lease is revoked.

    With several ranks, every rank stops at the same boundary: the first rank
    that sees the revocation at boundary *i* fixes the exit at *i + 1*."""

    def __init__(self, job: Job, iterable: Iterable[T]) -> None:
        self.job = job
        self._inner = iter(iterable)
        self._stopped = False
        #: Iterations yielded in this launch (the next boundary).
        self.step = 0

    @property
    def revoked(self) -> bool:
        """True if iteration ended because the lease was revoked."""
        return self._stopped

    def __iter__(self) -> "LeaseIter[T]":
        return self

    def __next__(self) -> T:
        if self._stopped:
            raise StopIteration
        job = self.job
        if job.env.world_size <= 1:
            if job.lease_revoked():
                self._stopped = True
                raise StopIteration
        else:
            exit_at = job._exit_at()
            if exit_at is None and job.lease_revoked():
                exit_at = job._propose_exit_at(self.step + 1)
            if exit_at is not None and self.step >= exit_at:
                self._stopped = True
                raise StopIteration
        if self.step == 0:
            try:
                job.report_started()
            except ClientError:
                pass  # only the measurement is lost; the job goes on
        self.step += 1
        return next(self._inner)
