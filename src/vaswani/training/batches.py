"""A training batch's rows for one process, and its move to the training device.

The trainer hands every process the same global batches (in the same order); process ``r`` of
``W`` trains on rows ``⌊r·n/W⌋ … ⌊(r+1)·n/W⌋ - 1`` of a batch of ``n`` rows, so that ``W``
processes together see exactly the batches one process sees. A batch is a tensor (rows first), a
dataclass, tuple, list or dict of them, or anything else (kept as it is); a task whose batch is
not cut by rows this way (the tagger's, whose gold tags run over the words of all its rows) gives
the trainer its own ``take_rows``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


def batch_rows(batch: Any) -> int:
    """The rows of ``batch``: the first dimension of its first tensor."""
    if isinstance(batch, Tensor):
        return batch.shape[0]
    for part in _parts(batch):
        rows = batch_rows(part)
        if rows >= 0:
            return rows
    return -1


def take_rows(batch: Any, start: int, stop: int) -> Any:
    """Rows ``start … stop - 1`` of every tensor of ``batch`` (a batch of the same kind)."""
    return _map(batch, lambda t: t[start:stop])


def share(rows: int, rank: int, world: int) -> tuple[int, int]:
    """The rows ``(start, stop)`` of process ``rank`` of ``world`` in a batch of ``rows``."""
    return rank * rows // world, (rank + 1) * rows // world


def rows_of_process(
    batch: Any, rank: int, world: int, take: Callable[[Any, int, int], Any]
) -> tuple[Any, bool]:
    """Process ``rank``'s rows of a global batch (cut by ``take``), and whether it has any: one
    with none gets the first row, to run with weight 0 (every process must run a forward and
    backward pass each step)."""
    if world == 1:
        return batch, True
    start, stop = share(batch_rows(batch), rank, world)
    return (take(batch, start, stop), True) if stop > start else (take(batch, 0, 1), False)


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor on ``device``: through pinned memory with a non-blocking copy
    on CUDA, so that the copy overlaps the work already queued."""
    if device.type == "cpu":
        return _map(batch, lambda t: t.cpu())
    if device.type == "cuda":
        return _map(batch, lambda t: t.pin_memory().to(device, non_blocking=True))
    return _map(batch, lambda t: t.to(device))


def _parts(batch: Any) -> list[Any]:
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    if isinstance(batch, (tuple, list)):
        return list(batch)
    if isinstance(batch, dict):
        return list(batch.values())
    return []


def _map(batch: Any, fn: Any) -> Any:
    """``batch`` with ``fn`` applied to each of its tensors."""
    if isinstance(batch, Tensor):
        return fn(batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {f.name: _map(getattr(batch, f.name), fn) for f in dataclasses.fields(batch)}
        return dataclasses.replace(batch, **changes)
    if isinstance(batch, tuple):
        return (
            type(batch)(*(_map(b, fn) for b in batch))
            if hasattr(batch, "_fields")
            else tuple(_map(b, fn) for b in batch)
        )
    if isinstance(batch, list):
        return [_map(b, fn) for b in batch]
    if isinstance(batch, dict):
        return {k: _map(v, fn) for k, v in batch.items()}
    return batch
