"""Checkpoints written atomically: a new one appears whole or not at all.

Layout under a run directory::

    checkpoints/step_00001000/
        model.safetensors     weights (safetensors: never unpickled)
        optimizer.pt          optimizer state, read back with weights_only=True
        trainer_state.json    step, data position, RNG states, elapsed time

A checkpoint is written into a temporary folder, every file is flushed to
disk, and the folder is then renamed into place; older checkpoints beyond the
kept number are removed only after that.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from vaswani.errors import RunDirError

CHECKPOINTS = "checkpoints"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    fsync_path(tmp)
    os.replace(tmp, path)


def atomic_save_model(model: nn.Module, path: Path) -> None:
    """Save weights as safetensors (tied weights stored once) through a temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    save_model(model, str(tmp))
    fsync_path(tmp)
    os.replace(tmp, path)


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights, refusing missing or unexpected tensors."""
    if not path.is_file():
        raise RunDirError(f"{path}: no such weights file")
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except Exception as exc:  # safetensors raises its own errors on corrupt files or shapes
        raise RunDirError(f"{path}: cannot load weights ({exc})") from None
    if missing or unexpected:
        raise RunDirError(
            f"{path}: weights do not fit the model (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    run_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
) -> Path:
    """Write ``checkpoints/step_N`` atomically and keep only the newest ``keep``."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state['step']:08d}"
    tmp = root / f".tmp_{final.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "rng": rng_state()}, tmp / "optimizer.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    for f in tmp.iterdir():
        fsync_path(f)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_path(root)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary folders are not listed)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer and RNG states; return the trainer state."""
    load_weights(model, path / "model.safetensors")
    try:
        extra = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except Exception as exc:  # a truncated or foreign file
        raise RunDirError(f"{path}: unreadable checkpoint ({exc})") from None
    optimizer.load_state_dict(extra["optimizer"])
    set_rng_state(extra["rng"])
    return state
