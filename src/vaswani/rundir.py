"""Run directories: everything needed to use a trained model again, behind one object.

::

    RUN_DIR/
        config.json          {"format_version", "task", "model", "train", "data"}
        model.safetensors    the trained weights (model.best.safetensors: the best by train.select_by)
        *tokenizer*.json     the tokenizers (each task names its own)
        metrics.json         final metrics
        train_log.csv        a row of kind "train" every train.log_every steps, one of kind "eval"
                             per evaluation (older runs: evaluation rows only, without "kind")
        tensorboard/         TensorBoard event files, with train.tensorboard
        checkpoints/         the last few complete checkpoints (resume)
        .lock                while a process writes the run (train, resume, average): its pid

:class:`RunDir` knows these files, reads and validates them (``config.json`` like a config from
the user) and writes them atomically, never through a symbolic link (:mod:`vaswani.io`): a run
directory that is a link, or that holds one, is refused in one line when a process takes it
(:meth:`RunDir.lock`). Turning a run directory into a usable model (a
``Translator``, a ``LanguageModel``...) is the task registry's job
(:func:`vaswani.tasks.registry.load`), which reads the directory through this class.
"""

from __future__ import annotations

import csv
import dataclasses
import fcntl
import io
import math
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

from torch import nn

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.io import (
    WEIGHTS,
    append_text,
    atomic_save_model,
    atomic_write,
    atomic_write_text,
    json_text,
    link_refused,
    load_weights,
    read_json,
    write_error,
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
        "source",
        "seed",
        "n_train",
        "n_valid",
        "n_test",
        "src",
        "tgt",
        "valid_src",
        "valid_tgt",
        "test_src",
        "test_tgt",
        "pairs",
        "columns",
        "vocab_size",
        "shared_vocab",
        "bleu_tokenize",
        "text",
        "tokenizer",
        "valid_fraction",
        "mask_prob",
        "mask_random",
        "mask_keep",
        "train_file",
        "dev_file",
        "file_format",
        "text_columns",
        "label_column",
        "labels",
        "init",
        "pool",
    )
)


def this_command() -> str:
    """This process's command line, as a user would type it (``vaswani train lm ...``), shortened."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    name = "vaswani" if name in ("vaswani", "__main__.py", "-c") else name
    command = " ".join([name, *sys.argv[1:]]).replace("\n", " ")
    return command if len(command) <= 200 else command[:199] + "…"


class RunLock:
    """The exclusive hold of one process on a run directory: ``fcntl.flock`` on its ``.lock``
    file, which holds the holder's pid and command. The kernel drops the lock when the process
    ends, however it ends, so the lock of a killed process is simply taken over. ``made`` is the
    topmost folder that creating the run made (None: the run directory was already there)."""

    def __init__(self, path: Path, fd: int, made: Path | None = None) -> None:
        self.path = path
        self.fd: int | None = fd
        self.made = made

    def release(self) -> None:
        """Remove the lock file (while still holding it, and only if it is this lock's) and let go."""
        if self.fd is None:
            return
        try:
            if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                self.path.unlink()
        except OSError:  # the run directory was removed meanwhile
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path, fd: int) -> str:
    """Who holds the lock file ``path`` (open as ``fd``): ``process 123 (vaswani train ...)``."""
    try:
        pid, _, command = os.pread(fd, 4096, 0).decode("utf-8", "replace").partition("\n")
    except OSError:
        pid, command = "", ""
    if not pid.strip().isdigit():
        return "another process"
    return f"process {pid.strip()}" + (f" ({command.strip()})" if command.strip() else "")


class RunDir:
    """The files of one run directory (see the module docstring); ``RunDir(path)`` reads nothing
    until asked."""

    CONFIG = "config.json"
    WEIGHTS = WEIGHTS
    METRICS = "metrics.json"
    LOG = "train_log.csv"
    CHECKPOINTS = "checkpoints"
    TENSORBOARD = "tensorboard"  # event files, with train.tensorboard (vaswani.training.tracking)
    LOCK = ".lock"
    BACKUP = "model.before-average.safetensors"
    BEST = "model.best.safetensors"  # the best weights by train.select_by (vaswani.training.selection)
    ADAPTER = "adapter.safetensors"  # a LoRA run's adapters, unmerged (vaswani.layers.lora)
    OWN_FILES = frozenset((CONFIG, WEIGHTS, METRICS, LOG, LOCK, BACKUP, BEST, ADAPTER))
    OWN_SUFFIXES = (".json", ".spm")  # tokenizers, labels, preprocessing, SentencePiece models

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._log_header: list[str] | None = None  # train_log.csv's columns, once read or written

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def file(self, name: str) -> Path:
        """The path of the run's file ``name`` (a tokenizer, hypotheses...)."""
        return self.path / name

    def owns(self, path: Path) -> bool:
        """Whether ``path`` (resolved, inside this run) is the run or one of the files its commands
        read: config, weights, metrics, log, lock, the weights kept by averaging, a top-level
        ``.json`` or ``.spm`` file (tokenizers...), anything under ``checkpoints/`` or ``tensorboard/``."""
        parts = path.relative_to(self.path.resolve()).parts
        if not parts or parts[0] in (self.CHECKPOINTS, self.TENSORBOARD):
            return True
        return len(parts) == 1 and (parts[0] in self.OWN_FILES or path.suffix in self.OWN_SUFFIXES)

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
        run = cls(out)
        if out.exists() and (not out.is_dir() or any(p.name != cls.LOCK for p in out.iterdir())):
            if out.is_dir():
                run.check_not_held()
            raise RunDirError(f"{out}: already exists and is not empty; choose another --out")
        return run

    @classmethod
    def create(cls, out: Path | None, name: str) -> tuple[RunDir, RunLock]:
        """:meth:`new`, then the folder made (an exclusive ``mkdir``: of two processes, one makes
        it) or taken empty, and locked (:meth:`lock`): another process that creates or trains the
        same directory gets a one-line :class:`RunDirError`, and nothing of its is touched."""
        run = cls.new(out, name)
        made = next((p for p in reversed([run.path, *run.path.parents]) if not p.exists()), None)
        try:
            run.path.mkdir(parents=True)
        except FileExistsError:
            made = None  # an empty folder, or one another process has just made: the lock decides
        except OSError as exc:
            raise write_error(run.path, exc) from None
        lock = run.lock()
        lock.made = made
        if any(p.name != cls.LOCK for p in run.path.iterdir()):  # another run began here meanwhile
            lock.release()
            raise RunDirError(f"{run.path}: already exists and is not empty; choose another --out")
        return run, lock

    def held_by(self) -> str | None:
        """Who holds this run (:func:`holder`), or None when no process does; changes nothing."""
        try:
            fd = os.open(self.path / self.LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return holder(self.path / self.LOCK, fd)
        finally:
            os.close(fd)
        return None

    def check_not_held(self) -> None:
        """A run that another process holds is a one-line :class:`RunDirError` naming it."""
        who = self.held_by()
        if who is not None:
            raise RunDirError(f"{self.path}: in use by {who}; wait until it ends, or stop it")

    def lock(self, command: str | None = None) -> RunLock:
        """Hold the run for this process (train, resume and average do, for their whole time):
        ``.lock`` is created, locked with ``fcntl.flock`` and given this pid and ``command``. A
        run held by another process is a one-line :class:`RunDirError` naming its pid and command.
        A run directory that is a symbolic link, or that holds one (a ``checkpoints`` or a
        ``train_log.csv`` planted as a link to elsewhere), is refused in one line naming the link
        (:meth:`refuse_links`): no file of a run is written through a link."""
        path = self.path / self.LOCK
        if self.path.is_symlink():
            raise RunDirError(
                f"{self.path}: a symbolic link; give the run directory itself, not a link to it"
            )
        if self.path.is_dir():
            self.refuse_links()
        while True:
            try:  # never through a link: a .lock planted as one would have its target overwritten
                fd = os.open(
                    path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644
                )
            except OSError as exc:
                if not self.path.is_dir():
                    raise RunDirError(f"{self.path}: no such run directory") from None
                if path.is_symlink():
                    raise link_refused(path) from None
                raise write_error(path, exc) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise RunDirError(f"{path}: not a regular file; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                who = holder(path, fd)
                os.close(fd)
                raise RunDirError(f"{self.path}: in use by {who}; wait until it ends, or stop it") from None
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # the holder removed the file as it let go: lock the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{command or this_command()}\n".encode(), 0)
        return RunLock(path, fd)

    def refuse_links(self) -> None:
        """A symbolic link among the run's own entries (its files, ``checkpoints``) is a one-line
        :class:`RunDirError` naming it: vaswani would write there (links inside ``checkpoints/`` are
        never listed, pruned or followed: :mod:`vaswani.training.checkpoint`)."""
        for child in sorted(self.path.iterdir()):
            if child.is_symlink():
                raise link_refused(child)

    def remove_stub(self, lock: RunLock) -> bool:
        """After a failure: remove this run if it has no checkpoint to resume from (what
        :meth:`create` made, or else the folder's contents); whether it was removed."""
        checkpoints = self.checkpoints
        if not self.path.is_dir() or (checkpoints.is_dir() and any(checkpoints.glob("step_*"))):
            return False
        if lock.made is None:
            for child in self.path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name != self.LOCK:
                    child.unlink()
            return True
        shutil.rmtree(self.path, ignore_errors=True)
        for folder in self.path.parents:  # the parents that create made, while they are empty
            if not folder.is_relative_to(lock.made):
                break
            try:
                folder.rmdir()
            except OSError:
                break
        return True

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
        """One row of ``train_log.csv`` (the header first, in a new log); a run directory removed
        during training is refused, not recreated. The header is every column seen so far: a row
        with a column it lacks (the first evaluation's metrics after training rows, or a resumed
        older log) rewrites the log once, atomically, with those columns added at the end and
        empty in the earlier rows."""
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: the run directory was removed during training; stopping")
        if self._log_header is None:
            self._log_header = self._read_log(header_only=True)[0]
        new = [name for name in row if name not in self._log_header]
        text = io.StringIO()
        if new or not self._log_header:
            header, rows = self._read_log()
            self._log_header = header + new
            writer = csv.DictWriter(text, fieldnames=self._log_header)
            writer.writeheader()
            writer.writerows([*rows, row])
            atomic_write_text(self.log, text.getvalue())
            return
        csv.DictWriter(text, fieldnames=self._log_header).writerow(row)
        append_text(self.log, text.getvalue())

    def truncate_log(self, step: int) -> None:
        """Drop the rows of ``train_log.csv`` after ``step`` (those a run wrote after the checkpoint
        it resumes from, before it was killed), so that the resumed run logs each step once."""
        header, rows = self._read_log()
        kept = [row for row in rows if _log_step(row) <= step]
        if len(kept) < len(rows):
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=header)
            writer.writeheader()
            writer.writerows(kept)
            atomic_write_text(self.log, text.getvalue())

    def _read_log(self, header_only: bool = False) -> tuple[list[str], list[dict[str, str]]]:
        """The header and rows of ``train_log.csv`` (none when there is no log yet)."""
        if not os.path.lexists(self.log):
            return [], []
        try:
            with self.log.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                return header, [] if header_only else list(reader)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise RunDirError(f"{self.log}: not a readable training log ({exc})") from None

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

    def write_adapter(self, data: bytes) -> None:
        """Write ``adapter.safetensors`` atomically from safetensors bytes."""
        atomic_write(self.path / self.ADAPTER, data)

    def write_best(self, data: bytes) -> None:
        """Write ``model.best.safetensors`` atomically from safetensors bytes."""
        atomic_write(self.path / self.BEST, data)


def _log_step(row: dict[str, str]) -> float:
    """The step of a row of ``train_log.csv`` (a row without a readable one counts as step 0)."""
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return 0.0


def _finite_or_null(value: Any) -> Any:
    """``value`` (JSON-like: mappings, lists, numbers) with every NaN and infinity replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value
