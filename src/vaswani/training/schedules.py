"""Learning-rate schedules as plain functions of the step (1-based).

Being pure functions of the step, they need no state in a checkpoint: a
resumed run recomputes the same rate.
"""

from __future__ import annotations

import math


def inverse_sqrt(step: int, peak: float, warmup: int) -> float:
    """The paper's schedule (section 5.3), lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5),
    rescaled so that its peak at ``step == warmup`` is ``peak``:
    peak · min(step / warmup, sqrt(warmup / step))."""
    if warmup == 0:
        return peak / math.sqrt(step)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def cosine(step: int, peak: float, warmup: int, total: int, floor: float = 0.0) -> float:
    """Linear warmup to ``peak``, then half a cosine down to ``floor`` at step ``total``."""
    if warmup and step <= warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def constant(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak``, then constant."""
    return peak * min(1.0, step / warmup) if warmup else peak


def learning_rate(name: str, step: int, peak: float, warmup: int, total: int, floor: float = 0.0) -> float:
    """Resolve the ``schedule`` config field, in one place."""
    if name == "inverse_sqrt":
        return inverse_sqrt(step, peak, warmup)
    if name == "cosine":
        return cosine(step, peak, warmup, total, floor)
    return constant(step, peak, warmup)
