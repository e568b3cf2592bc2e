"""Run directories: everything needed to use a trained model again.

::

    RUN_DIR/
        config.json          {"format_version", "task", "model", "train", "data"}
        model.safetensors    the trained weights
        *tokenizer*.json     the tokenizers (task-specific names)
        metrics.json         final metrics
        train_log.csv        one row per evaluation
        checkpoints/         the last few complete checkpoints (resume)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.training.checkpoint import atomic_write_text

FORMAT_VERSION = 1
CONFIG = "config.json"


def write_run_config(run_dir: Path, run: RunConfig) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "task": run.task,
        "model": run.model.to_dict(),
        "train": run.train.to_dict(),
        "data": run.data,
    }
    atomic_write_text(run_dir / CONFIG, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def read_run_config(run_dir: Path, task: str | None = None) -> RunConfig:
    """Read and validate ``config.json`` like a config from the user; with ``task``,
    refuse a run directory of another task."""
    path = run_dir / CONFIG
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise RunDirError(f"{run_dir}: not a vaswani run directory (no {CONFIG})")
    try:
        payload: Any = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    unknown = set(payload) - {"format_version", "task", "model", "train", "data"}
    if unknown:
        raise ConfigError(f"{path}: unknown config field '{sorted(unknown)[0]}'")
    version = payload.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise RunDirError(
            f"{path}: format_version {version!r} is not supported (this vaswani reads up to "
            f"{FORMAT_VERSION}); upgrade vaswani"
        )
    found = payload.get("task")
    if task is not None and found != task:
        raise RunDirError(f"{run_dir}: a run directory of task '{found}', not '{task}'")
    return RunConfig(
        task=str(found),
        model=ModelConfig.from_dict(payload.get("model", {}), source=str(path)),
        train=TrainConfig.from_dict(payload.get("train", {}), source=str(path)),
        data=dict(payload.get("data") or {}),
    )
