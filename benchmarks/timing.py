"""What the side-by-side benchmarks share: fair interleaving and bf16 autocast on the CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch


def interleave(a: Callable[[], None], b: Callable[[], None], rounds: int) -> None:
    """A B B A A B B A …: each measurement of A sits next to one of B, and a linear drift
    of the machine's speed hits both alike."""
    for i in range(rounds):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        first()
        second()


def autocast(bf16: bool) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on the CPU, or nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
