"""Where the trainer's numbers go: rows of ``train_log.csv`` and, with ``train.tensorboard``,
TensorBoard event files in ``RUN_DIR/tensorboard``.

Every ``train.log_every`` steps a row of kind ``train``: the mean train loss of those steps, the
learning rate of the last one, the mean gradient norm (before clipping) and the tokens per second
of training time; every evaluation a row of kind ``eval`` with the validation metrics. The steps
since the last row (:class:`Window`) are part of the trainer's saved state, so that a resumed run
writes the same rows as one that was never stopped; rows after the checkpoint it resumes from
(written before a crash) are dropped first, and its TensorBoard file starts by purging them too.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from vaswani.errors import ConfigError
from vaswani.io import link_refused, open_for_write, write_error
from vaswani.rundir import RunDir

TENSORBOARD_HINT = "pip install tensorboard (or the tensorboard extra: pip install -e '.[tensorboard]')"


class Window:
    """The applied steps since the last ``train`` row, kept in ``TrainerState.window`` (a JSON
    mapping: ``steps``, ``loss``, ``norm``, ``tokens`` summed, ``since`` the training seconds when it
    began)."""

    def __init__(self, sums: dict[str, float], seconds: float) -> None:
        self.sums = sums  # the state's own mapping, updated in place
        if not sums:
            sums.update(self._fresh(seconds))

    @staticmethod
    def _fresh(seconds: float) -> dict[str, float]:
        return {"steps": 0, "loss": 0.0, "norm": 0.0, "tokens": 0, "since": seconds}

    def add(self, loss: float, norm: float, tokens: int) -> None:
        """Count one applied step."""
        self.sums["steps"] += 1
        self.sums["loss"] += loss
        self.sums["norm"] += norm
        self.sums["tokens"] += tokens

    def row(self, lr: float, seconds: float) -> dict[str, float]:
        """The window's means (it must hold a step), and a fresh window beginning at ``seconds``."""
        sums, steps = self.sums, max(1, int(self.sums["steps"]))
        values = {
            "lr": lr,
            "train_loss": round(sums["loss"] / steps, 5),
            "grad_norm": round(sums["norm"] / steps, 5),
            "tokens_per_second": round(sums["tokens"] / max(seconds - sums["since"], 1e-9), 1),
        }
        self.sums.update(self._fresh(seconds))
        return values


class EventFile:
    """TensorBoard scalars in a new event file of ``folder``. Written here (records framed by the
    ``tensorboard`` package's ``RecordWriter``) rather than by ``SummaryWriter``, which opens its
    file by path, following a symbolic link planted there, and writes from a thread: this file is
    opened through :func:`vaswani.io.open_for_write` and each record reaches it at once. ``purge_from``
    (a resumed run's first step) tells TensorBoard to drop the events of earlier files from there on."""

    def __init__(self, folder: Path, purge_from: int | None = None) -> None:
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError:
            raise ConfigError(f"--tensorboard needs the tensorboard package: {TENSORBOARD_HINT}") from None
        self.event_pb2, self.summary_pb2 = event_pb2, summary_pb2
        if folder.is_symlink():
            raise link_refused(folder)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise write_error(folder, exc) from None
        self.file = self._new_file(folder, name)
        self.records = RecordWriter(self.file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_from is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._write(event_pb2.Event(wall_time=time.time(), step=purge_from, session_log=start))

    def _new_file(self, folder: Path, name: str) -> BinaryIO:
        """A new file ``name.N`` of ``folder``, N the first number not taken (a run resumed by the
        same process within the same second)."""
        for number in itertools.count():
            self.path = folder / f"{name}.{number}"
            try:
                return os.fdopen(open_for_write(self.path, os.O_EXCL), "wb")
            except FileExistsError:
                continue
            except OSError as exc:
                raise write_error(self.path, exc) from None
        raise AssertionError("unreachable")

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """One event holding ``values`` (tag → number) at ``step``."""
        summary = self.summary_pb2.Summary(
            value=[self.summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        )
        self._write(self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event: Any) -> None:
        try:
            self.records.write(event.SerializeToString())
            self.file.flush()
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def close(self) -> None:
        self.file.close()


class Tracker:
    """The main process's log of a training run (``enabled`` False: the other processes', which
    write nothing). ``start_step`` is where training begins: a resumed run first drops the rows
    after it."""

    def __init__(self, files: RunDir, tensorboard: bool, start_step: int, enabled: bool = True) -> None:
        self.files = files
        self.enabled = enabled
        self.events: EventFile | None = None
        if not enabled:
            return
        if start_step > 0:
            files.truncate_log(start_step)
        if tensorboard:
            purge_from = start_step + 1 if start_step > 0 else None
            self.events = EventFile(files.file(RunDir.TENSORBOARD), purge_from)

    def log(self, kind: str, step: int, seconds: float, values: dict[str, float]) -> None:
        """A row of ``kind`` (``train`` or ``eval``) at ``step`` after ``seconds`` of training."""
        if not self.enabled:
            return
        self.files.append_log({"step": step, "kind": kind, "seconds": round(seconds, 2), **values})
        if self.events is not None:
            self.events.scalars(step, values)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.events is not None:
            self.events.close()
