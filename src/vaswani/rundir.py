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

from vaswani.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.io import atomic_write_text

FORMAT_VERSION = 1
CONFIG = "config.json"
SECTIONS = ("format_version", "task", "model", "train", "data")


def write_run_config(run_dir: Path, run: RunConfig) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "task": run.task,
        "model": run.model.to_dict(),
        "train": run.train.to_dict(),
        "data": run.data.to_dict(),
    }
    atomic_write_text(run_dir / CONFIG, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def _no_constant(name: str) -> Any:
    """Refuse ``NaN`` and ``Infinity``, which Python's json reads by default but JSON does not have."""
    raise ValueError(f"{name} is not a JSON number")


def read_run_config(run_dir: Path, task: str | None = None) -> RunConfig:
    """Read and validate ``config.json`` like a config from the user; with ``task``,
    refuse a run directory of another task."""
    path = run_dir / CONFIG
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise RunDirError(f"{run_dir}: not a vaswani run directory (no {CONFIG})")
    try:
        payload: Any = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN or Infinity
        raise RunDirError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    version = payload.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RunDirError(f"{path}: config field 'format_version' must be an integer >= 1, got {version!r}")
    if version > FORMAT_VERSION:  # checked first: a newer format may have fields this one does not know
        raise RunDirError(
            f"{path}: format_version {version} is not supported (this vaswani reads up to "
            f"{FORMAT_VERSION}); upgrade vaswani"
        )
    unknown = sorted(set(payload) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown config field '{unknown[0]}'")
    missing = [name for name in SECTIONS if name not in payload]
    if missing:
        raise ConfigError(f"{path}: missing config field '{missing[0]}'")
    found = payload["task"]
    if task is not None and found != task:
        raise RunDirError(f"{run_dir}: a run directory of task {found!r}, not {task!r}")
    try:
        model = ModelConfig.from_dict(payload["model"], source=str(path))
        train = TrainConfig.from_dict(payload["train"], source=str(path))
        data = DataConfig.from_dict(payload["data"], source=str(path))
    except ConfigError as exc:  # name the file when the message does not already
        message = str(exc)
        raise ConfigError(message if message.startswith(f"{path}:") else f"{path}: {message}") from None
    return RunConfig(task=str(found), model=model, train=train, data=data)
