"""The best weights by a validation metric (``train.select_by``), kept beside the last ones.

After each evaluation the trainer asks :func:`improves` whether the metrics beat the best so far
(kept in the trainer state, so that a resumed run compares as the uninterrupted one did); if they
do, it writes ``model.best.safetensors`` (:meth:`vaswani.rundir.RunDir.write_best`) with
:func:`best_metadata` in its safetensors header. A tie goes to the newer weights: on an easy
corpus BLEU reaches its ceiling early, and the later weights have trained longer.
"""

from __future__ import annotations

import math
from pathlib import Path

from vaswani.errors import ConfigError
from vaswani.io import safetensors_metadata
from vaswani.rundir import RunDir
from vaswani.training.state import TrainerState

SELECTIONS: dict[str, tuple[str, bool]] = {
    "bleu": ("valid_bleu", True),
    "chrf": ("valid_chrf", True),
    "loss": ("valid_loss", False),
}
"""``select_by`` → (the validation metric, whether higher is better)."""


def improves(select_by: str, metrics: dict[str, float], best: dict[str, float]) -> bool:
    """Whether ``metrics`` are at least as good as ``best`` (``{}``: none yet) by ``select_by``'s
    metric; a non-finite value never is. A task without that metric is a one-line
    :class:`~vaswani.errors.ConfigError` naming the field."""
    key, higher = SELECTIONS[select_by]
    if key not in metrics:
        raise ConfigError(
            f"config field 'train.select_by': {select_by!r} needs the validation metric {key}, which "
            f"this task does not report (it reports {', '.join(sorted(metrics)) or 'none'})"
        )
    value = metrics[key]
    if not math.isfinite(value):
        return False
    if not best:
        return True
    return value >= best[key] if higher else value <= best[key]


def update_best(select_by: str, state: TrainerState) -> dict[str, str] | None:
    """After an evaluation (``state.metrics``): where it :func:`improves` on ``state.best``, keep its
    step and metric there and return the safetensors metadata of the best weights (``select_by``,
    the metric, its value, the step); else None."""
    if not improves(select_by, state.metrics, state.best):
        return None
    key, _ = SELECTIONS[select_by]
    state.best = {"step": state.step, key: state.metrics[key]}
    return {"select_by": select_by, "metric": key, "value": repr(state.metrics[key]), "step": str(state.step)}


def chosen_weights(folder: RunDir, select_by: str | None) -> tuple[Path, str]:
    """The weights a run is used with, and a line saying which: the best by ``select_by`` where the
    run kept them (``model.best.safetensors``), else the last (``model.safetensors``; a run trained
    before ``select_by`` existed, or without it). An average that ``vaswani average`` wrote over the
    last weights (its header names the averaged checkpoints) is what the user chose: it wins."""
    best = folder.path / RunDir.BEST
    last = safetensors_metadata(folder.weights) if folder.weights.is_file() else {}
    if "averaged_checkpoints" in last:
        named = last["averaged_checkpoints"].replace(",", ", ")
        return folder.weights, f"weights: {RunDir.WEIGHTS} (the average of {named}: vaswani average)"
    if select_by is None or not best.is_file():
        why = "no train.select_by" if select_by is None else f"no {RunDir.BEST} yet"
        return folder.weights, f"weights: {RunDir.WEIGHTS} (the last; {why})"
    about = safetensors_metadata(best)
    return best, (
        f"weights: {RunDir.BEST} (the best by {select_by}: {about.get('metric', '?')} "
        f"{float(about.get('value', 'nan')):.4g} at step {about.get('step', '?')})"
    )
