"""Run directories: everything needed to use a trained model again, behind one object.

::

    RUN_DIR/
        config.json          {"format_version", "task", "model", "train", "data"}
        model.safetensors    the trained weights
        *tokenizer*.json     the tokenizers (each task names its own)
        metrics.json         final metrics
        train_log.csv        one row per evaluation
        checkpoints/         the last few complete checkpoints (resume)

:class:`RunDir` knows these files, reads and validates them (``config.json`` like a config from
the user) and writes them atomically. Turning a run directory into a usable model (a
``Translator``, a ``LanguageModel``...) is the task registry's job
(:func:`vaswani.tasks.registry.load`), which reads the directory through this class.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from torch import nn

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.io import (
    WEIGHTS,
    atomic_save_model,
    atomic_write,
    atomic_write_text,
    json_text,
    load_weights,
    read_json,
)
from vaswani.resources import check_fits, check_weights
from vaswani.schema import Config

FORMAT_VERSION = 1
SECTIONS = ("format_version", "task", "model", "train", "data")
# The fields of the one data section that every task shared before each task had its own data
# config: in a run directory a field of these that the task's config lacks was unused, and is
# ignored; any other unknown field is refused.
SHARED_DATA_FIELDS = frozenset(
    (
        "source", "seed", "n_train", "n_valid", "n_test", "src", "tgt", "valid_src", "valid_tgt",
        "test_src", "test_tgt", "pairs", "columns", "vocab_size", "shared_vocab", "bleu_tokenize", "text",
        "tokenizer", "valid_fraction", "mask_prob", "mask_random", "mask_keep", "train_file", "dev_file",
        "file_format", "text_columns", "label_column", "labels", "init", "pool",
    )
)  # fmt: skip


class RunDir:
    """The files of one run directory (see the module docstring); ``RunDir(path)`` reads nothing
    until asked."""

    CONFIG = "config.json"
    WEIGHTS = WEIGHTS
    METRICS = "metrics.json"
    LOG = "train_log.csv"
    CHECKPOINTS = "checkpoints"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def file(self, name: str) -> Path:
        """The path of the run's file ``name`` (a tokenizer, hypotheses...)."""
        return self.path / name

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def weights(self) -> Path:
        return self.path / self.WEIGHTS

    @property
    def metrics_path(self) -> Path:
        return self.path / self.METRICS

    @property
    def log(self) -> Path:
        return self.path / self.LOG

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @classmethod
    def new(cls, out: Path | None, name: str) -> RunDir:
        """A run directory that is new or empty (``runs/NAME-DATE-TIME`` when ``out`` is None): an
        existing run is never overwritten. Nothing is created yet."""
        if out is None:
            out = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise RunDirError(f"{out}: already exists and is not empty; choose another --out")
        return cls(out)

    def read_config(self, task: str | None = None, data: type[Config] | None = None) -> RunConfig:
        """``config.json``, validated like a config from the user; with ``task``, a run directory
        of another task is refused in one line. ``data`` is the class of the task's data section
        (see :data:`vaswani.tasks.registry.TASKS`); without it the section is not read (``data``
        of the result is None)."""
        path = self.config_path
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: no such run directory")
        if not path.is_file():
            raise RunDirError(f"{self.path}: not a vaswani run directory (no {self.CONFIG})")
        payload = read_json(path, RunDirError)
        if not isinstance(payload, dict):
            raise RunDirError(f"{path}: expected a JSON object")
        version = payload.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise RunDirError(
                f"{path}: config field 'format_version' must be an integer >= 1, got {version!r}"
            )
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
            raise RunDirError(f"{self.path}: a run directory of task {found!r}, not {task!r}")
        sections = {name: payload[name] for name in ("model", "train", "data")}
        for name, value in sections.items():
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: section '{name}' must be a mapping")
        if data is not None:
            sections = self._with_task_data(sections, data)
        try:
            model = ModelConfig.from_dict(sections["model"], source=str(path))
            train = TrainConfig.from_dict(sections["train"], source=str(path))
            data_config = None if data is None else data.from_dict(sections["data"], source=str(path))
        except ConfigError as exc:  # name the file when the message does not already
            message = str(exc)
            raise ConfigError(message if message.startswith(f"{path}:") else f"{path}: {message}") from None
        if self.weights.is_file():  # the header against the config, before any model is built
            check_weights(self.weights, model)
        check_fits(model, where=f"{path}: ")
        return RunConfig(task=str(found), model=model, train=train, data=data_config)

    @staticmethod
    def _with_task_data(sections: dict[str, Any], data: type[Config]) -> dict[str, Any]:
        """The sections with the data section cut to the fields of ``data``: a field of the earlier
        shared data section that the task does not read is dropped, and a classifier's
        ``batch_size``, once a data field, moves to the training section where it now is."""
        fields = {f.name for f in dataclasses.fields(data)}  # type: ignore[arg-type]
        kept = {k: v for k, v in sections["data"].items() if k in fields or k not in SHARED_DATA_FIELDS}
        train = dict(sections["train"])
        if "batch_size" in kept and "batch_size" not in fields:
            train.setdefault("batch_size", kept.pop("batch_size"))
        return {**sections, "train": train, "data": kept}

    def write_config(self, run: RunConfig) -> None:
        payload = {
            "format_version": FORMAT_VERSION,
            "task": run.task,
            "model": run.model.to_dict(),
            "train": run.train.to_dict(),
            "data": run.data.to_dict() if run.data is not None else {},
        }
        atomic_write_text(self.config_path, json_text(payload, ensure_ascii=False))

    def read_metrics(self) -> dict[str, Any]:
        """``metrics.json`` ({} when the run has none yet)."""
        if not self.metrics_path.is_file():
            return {}
        loaded = read_json(self.metrics_path, RunDirError)
        if not isinstance(loaded, dict):
            raise RunDirError(f"{self.metrics_path}: expected a JSON object")
        return loaded

    def append_log(self, row: dict[str, Any]) -> None:
        """One row of ``train_log.csv`` (the header first, in a new log)."""
        new = not self.log.exists()
        with self.log.open("a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """Write ``metrics.json``; a metric that is not a finite number (the loss of a diverged run)
        is written as null, since JSON has no NaN or infinity."""
        atomic_write_text(self.metrics_path, json_text(_finite_or_null(metrics)))

    def load_weights(self, model: nn.Module) -> nn.Module:
        """Fill ``model`` from ``model.safetensors`` (never unpickled); return it."""
        load_weights(model, self.weights)
        return model

    def save_weights(self, model: nn.Module) -> None:
        atomic_save_model(model, self.weights)

    def write_weights(self, data: bytes) -> None:
        """Write ``model.safetensors`` atomically from safetensors bytes (:func:`vaswani.io.model_bytes`)."""
        atomic_write(self.weights, data)


def _finite_or_null(value: Any) -> Any:
    """``value`` (JSON-like: mappings, lists, numbers) with every NaN and infinity replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value
