"""Learning-rate schedules as plain functions of the step (1-based).

Being pure functions of the step, they need no state in a checkpoint: a
resumed run recomputes the same rate. The one exception is a run that a time budget ends: its
warmup is planned once from the pace of its first steps (:func:`budget_plan`, the plan kept in the
trainer's state), and its cosine decay follows the training time spent (:func:`cosine_at`).
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
    return cosine_at((step - warmup) / max(1, total - warmup), peak, floor)


def cosine_at(progress: float, peak: float, floor: float = 0.0) -> float:
    """Half a cosine from ``peak`` (progress 0) down to ``floor`` (progress 1 and after):
    floor + (peak - floor) (1 + cos(pi min(progress, 1))) / 2."""
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))


def constant(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak``, then constant."""
    return peak * min(1.0, step / warmup) if warmup else peak


WARMUP_SHARE = 0.1
"""The most of a time budget's planned steps that warmup may take."""


def budget_plan(
    step: int, seconds_per_step: float, seconds_left: float, max_steps: int, warmup: int
) -> tuple[int, int]:
    """The schedule's (warmup, total steps) for a run at ``step`` with ``seconds_left`` of its time
    budget at ``seconds_per_step``: where the budget ends the run before ``max_steps``, the total
    is the step it ends at and warmup is capped to :data:`WARMUP_SHARE` of it (so that a short
    budget still reaches the peak rate and decays to the end exactly when its time runs out);
    otherwise ``(warmup, max_steps)``, the schedule without a budget."""
    reachable = step + int(seconds_left / max(seconds_per_step, 1e-12))
    if reachable >= max_steps:
        return warmup, max_steps
    total = max(step + 1, reachable)
    return min(warmup, math.ceil(WARMUP_SHARE * total)), total


def learning_rate(name: str, step: int, peak: float, warmup: int, total: int, floor: float = 0.0) -> float:
    """Resolve the ``schedule`` config field, in one place."""
    if name == "inverse_sqrt":
        return inverse_sqrt(step, peak, warmup)
    if name == "cosine":
        return cosine(step, peak, warmup, total, floor)
    return constant(step, peak, warmup)
