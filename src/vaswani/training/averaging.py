"""Checkpoint averaging: the weights of the newest N checkpoints of a run,

    θ̄ = (1/N) Σ_{i=1..N} θ_i,

as the paper does for its results (base models: the last 5 checkpoints, written every 10
minutes; big models: the last 20). Only weights are touched, so any task's run directory
works. Each checkpoint's ``model.safetensors`` is checked against its manifest's sha256
before it is read (safetensors: nothing is unpickled), and nothing is written unless every
one of them is intact and they agree on names and shapes.

By default the average replaces ``RUN_DIR/model.safetensors``, which every command loads;
the weights it replaces are first kept in ``RUN_DIR/model.before-average.safetensors``
(once: a later averaging leaves that file alone, so it always holds the trained weights).
Each file is written through a temporary file and a rename: it is whole, old or new, at
every moment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save
from torch import Tensor

from vaswani.errors import RunDirError
from vaswani.io import WEIGHTS, atomic_write, first_line
from vaswani.layers.lora import merged_state
from vaswani.rundir import RunDir
from vaswani.training.checkpoint import CHECKPOINTS, checkpoint_problem, list_checkpoints

BACKUP = RunDir.BACKUP


@dataclass(frozen=True)
class Averaged:
    """What :func:`average_checkpoints` did: the checkpoints averaged, the file written, and
    where the replaced weights are (None when ``out`` was given or there were none)."""

    checkpoints: list[Path]
    out: Path
    backup: Path | None


def newest_checkpoints(run_dir: Path, n: int) -> list[Path]:
    """The newest ``n`` checkpoints of ``run_dir``, oldest first, each with weights that match
    their manifest; otherwise a one-line :class:`~vaswani.errors.RunDirError`."""
    if n < 1:
        raise ValueError(f"the number of checkpoints to average must be >= 1, got {n}")
    kept = list_checkpoints(run_dir)
    if not kept:
        raise RunDirError(f"{run_dir}: no checkpoints to average (nothing in {CHECKPOINTS}/)")
    if n > len(kept):
        raise RunDirError(
            f"{run_dir / CHECKPOINTS}: {len(kept)} checkpoint{'s' * (len(kept) != 1)} kept, cannot "
            f"average the last {n}; train with --keep-checkpoints {n} (train.keep_checkpoints) to keep more"
        )
    chosen = kept[-n:]
    for path in chosen:
        problem = checkpoint_problem(path, (WEIGHTS,))
        if problem is not None:
            raise RunDirError(f"{path}: {problem}; not averaging a damaged checkpoint")
    return chosen


def average_weights(
    files: Sequence[Path], lora_scale: Callable[[], float] | None = None
) -> dict[str, Tensor]:
    """θ̄ = (1/N) Σ θ_i over the safetensors ``files``, summed in float64 and returned in each
    tensor's own dtype. The files must hold the same names and shapes; a tensor that is not
    floating-point (a step counter, say) must be equal in all of them and is kept as it is. The
    checkpoints of a LoRA run (unmerged adapters) are merged first, each with its own adapters
    (W_i = W + (α / r) B_i A_i, ``lora_scale()`` giving α / r), so that the average is that of the
    models the checkpoints compute."""
    total: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    first = files[0]
    for path in files:
        try:
            weights = load_file(str(path))
        except Exception as exc:  # safetensors raises its own error types on foreign or corrupt files
            raise RunDirError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
        if lora_scale is not None and any(name.endswith(".lora_A") for name in weights):
            weights = merged_state(weights, lora_scale())
        if total and set(weights) != set(total):
            odd = sorted(set(weights) ^ set(total))[:3]
            raise RunDirError(f"{path}: its tensors differ from those of {first} ({odd}): not the same model")
        for name, tensor in weights.items():
            if name not in total:
                dtypes[name] = tensor.dtype
                total[name] = tensor.double() if tensor.is_floating_point() else tensor
            elif tensor.shape != total[name].shape:
                raise RunDirError(
                    f"{path}: tensor '{name}' has shape {list(tensor.shape)}, {list(total[name].shape)} "
                    f"in {first}: not the same model"
                )
            elif tensor.is_floating_point():
                total[name] += tensor.double()
            elif not torch.equal(tensor, total[name]):
                raise RunDirError(f"{path}: tensor '{name}' is not floating-point and differs from {first}")
    return {
        name: (t / len(files)).to(dtypes[name]) if t.is_floating_point() else t for name, t in total.items()
    }


def lora_scale(run_dir: Path) -> float:
    """α / r of the LoRA run ``run_dir`` (its ``config.json``)."""
    train = RunDir(run_dir).read_config().train
    if train.lora_rank is None:
        raise RunDirError(
            f"{run_dir}: its checkpoints hold LoRA adapters, its config.json no train.lora_rank"
        )
    return train.lora_alpha / train.lora_rank


def average_checkpoints(run_dir: Path, last: int, out: Path | None = None) -> Averaged:
    """Average the weights of the newest ``last`` checkpoints of ``run_dir`` (θ̄ = (1/N) Σ θ_i)
    and write them atomically to ``out``, by default to ``run_dir/model.safetensors`` after
    keeping the weights it replaces (see the module docstring). Nothing is written when a
    checkpoint is missing or damaged."""
    return write_average(run_dir, newest_checkpoints(run_dir, last), out)


def write_average(run_dir: Path, chosen: Sequence[Path], out: Path | None = None) -> Averaged:
    """The average of the ``chosen`` checkpoints (:func:`newest_checkpoints`) of ``run_dir``,
    written as :func:`average_checkpoints` writes it."""
    averaged = average_weights([path / WEIGHTS for path in chosen], lambda: lora_scale(run_dir))
    data = save(averaged, metadata={"averaged_checkpoints": ",".join(path.name for path in chosen)})
    weights = run_dir / WEIGHTS
    target = weights if out is None else out
    backup = None
    if target.resolve() == weights.resolve() and weights.is_file():
        backup = run_dir / BACKUP
        if not backup.exists():
            atomic_write(backup, weights.read_bytes())
    atomic_write(target, data)
    return Averaged(list(chosen), target, backup)
