"""PyTorch helpers: a state (``state_dict`` s, step counters, anything
``torch.save`` takes) as an atomic checkpoint of the job. Importing this
module needs torch; the rest of ``blox_client`` does not."""

from __future__ import annotations

import io
from typing import Any, Optional

import torch as _torch

from . import Job

__all__ = ["save", "load"]


def save(job: Job, name: str, state: Any) -> None:
    """Saves ``state`` with ``torch.save`` as checkpoint ``name`` (atomically)."""
    buf = io.BytesIO()
    _torch.save(state, buf)
    job.save_checkpoint(name, buf.getvalue())


def load(job: Job, name: str, map_location: Any = None) -> Optional[Any]:
    """The state saved as ``name`` by an earlier launch, if resuming and it
    exists (``map_location`` as for ``torch.load``, e.g. ``"cpu"``)."""
    data = job.load_checkpoint(name)
    if data is None:
        return None
    return _torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
