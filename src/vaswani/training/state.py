"""Where training stands (:class:`TrainerState`), saved in each checkpoint's ``trainer_state.json``
and read back checked like a config."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vaswani.errors import RunDirError


@dataclass
class TrainerState:
    """Where training stands; saved in each checkpoint."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    train_seconds: float = 0.0
    tokens: int = 0
    bad_steps: int = 0  # in a row, up to now
    skipped_steps: int = 0  # in all
    metrics: dict[str, float] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)  # train.select_by's best evaluation: step, metric
    # a time budget's schedule (Trainer._schedule): warmup, total, and the budget it was planned for
    schedule_plan: dict[str, float] = field(default_factory=dict)
    # the steps since the last row of train_log.csv (vaswani.training.tracking.Window)
    window: dict[str, float] = field(default_factory=dict)


STATE_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "dict[str, float]": dict,
}
"""The annotation of each :class:`TrainerState` field → the JSON values it accepts."""


def restored_state(saved: Any, path: Path) -> TrainerState:
    """The :class:`TrainerState` read from ``path`` (a checkpoint's ``trainer_state.json``), checked
    like a config: a field this vaswani does not know, or a value of another type, is a one-line
    :class:`~vaswani.errors.RunDirError`."""
    if not isinstance(saved, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    annotations = {f.name: str(f.type) for f in fields(TrainerState)}
    for name, value in saved.items():
        if name not in annotations:
            raise RunDirError(f"{path}: unknown field '{name}' (written by a newer vaswani? upgrade vaswani)")
        if isinstance(value, bool) or not isinstance(value, STATE_TYPES[annotations[name]]):
            raise RunDirError(f"{path}: field '{name}' must be {annotations[name]}, got {value!r}")
    return TrainerState(**saved)
