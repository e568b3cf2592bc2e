"""Where the trainer's numbers go: rows of ``train_log.csv``; with ``train.tensorboard``,
TensorBoard event files in ``RUN_DIR/tensorboard``; with ``train.mlflow`` (a tracking URI), the
same numbers, and the config's fields as parameters, in an MLflow run.

Every ``train.log_every`` steps a row of kind ``train``: the mean train loss of those steps, the
learning rate of the last one, the mean gradient norm (before clipping) and the tokens per second
of training time; every evaluation a row of kind ``eval`` with the validation metrics. The steps
since the last row (:class:`Window`) are part of the trainer's saved state, so that a resumed run
writes the same rows as one that was never stopped; rows after the checkpoint it resumes from
(written before a crash) are dropped first, and its TensorBoard file starts by purging them too.
A resumed run logs to the MLflow run it began (its id is kept in ``RUN_DIR/mlflow.json``); MLflow
keeps every value it was sent, so steps logged again after a crash appear twice in its history.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from vaswani.errors import ConfigError
from vaswani.io import atomic_write_text, link_refused, open_for_write, write_error
from vaswani.rundir import RunDir

TENSORBOARD_HINT = "pip install tensorboard (or the tensorboard extra: pip install -e '.[tensorboard]')"
MLFLOW_HINT = "pip install mlflow-skinny (or the mlflow extra: pip install -e '.[mlflow]')"
MLFLOW_FILE = "mlflow.json"  # {"uri": ..., "run_id": ...}: the MLflow run a resumed run continues


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


def flat_fields(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"model": {"d_model": 256}}`` as ``{"model.d_model": "256"}``: a run config as parameters."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flat_fields(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value) if not isinstance(value, str) else value
    return flat


class MlflowRun:
    """An MLflow run in experiment ``vaswani`` at tracking ``uri``, through ``MlflowClient`` (no global
    state): named after the run directory, the config's fields as parameters, each log row's values
    as metrics at its step, ended FINISHED, or FAILED when training raised. A ``uri`` without a
    scheme is a local folder: MLflow's file store, which MLflow 3 keeps in maintenance mode and
    opens only when ``MLFLOW_ALLOW_FILE_STORE`` is set (set here for that case)."""

    def __init__(self, uri: str, files: RunDir) -> None:
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ConfigError(f"--mlflow needs the mlflow package: {MLFLOW_HINT}") from None
        if "://" not in uri and not uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = Path(uri).resolve().as_uri()
        self.Metric, self.files = Metric, files
        self.client = MlflowClient(uri)
        kept = self._kept()
        if kept.get("uri") == uri and kept.get("run_id"):
            self.run_id = str(kept["run_id"])
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name("vaswani")
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment("vaswani")
        run = self.client.create_run(experiment_id, run_name=files.path.name)
        self.run_id = run.info.run_id
        config = json.loads(files.file(RunDir.CONFIG).read_text(encoding="utf-8"))
        params = [Param(k, v[:6000]) for k, v in flat_fields(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=params[start : start + 100])
        atomic_write_text(files.file(MLFLOW_FILE), json.dumps({"uri": uri, "run_id": self.run_id}))

    def _kept(self) -> dict[str, Any]:
        path = self.files.file(MLFLOW_FILE)
        try:
            return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, ValueError):
            return {}

    def metrics(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[self.Metric(k, float(v), now, step) for k, v in values.items()]
        )

    def end(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


class Tracker:
    """The main process's log of a training run (``enabled`` False: the other processes', which
    write nothing). ``start_step`` is where training begins: a resumed run first drops the rows
    after it."""

    def __init__(
        self,
        files: RunDir,
        tensorboard: bool,
        start_step: int,
        enabled: bool = True,
        mlflow: str | None = None,
    ) -> None:
        self.files = files
        self.enabled = enabled
        self.events: EventFile | None = None
        self.mlflow: MlflowRun | None = None
        if not enabled:
            return
        if start_step > 0:
            files.truncate_log(start_step)
        if tensorboard:
            purge_from = start_step + 1 if start_step > 0 else None
            self.events = EventFile(files.file(RunDir.TENSORBOARD), purge_from)
        if mlflow is not None:
            self.mlflow = MlflowRun(mlflow, files)

    def log(self, kind: str, step: int, seconds: float, values: dict[str, float]) -> None:
        """A row of ``kind`` (``train`` or ``eval``) at ``step`` after ``seconds`` of training."""
        if not self.enabled:
            return
        self.files.append_log({"step": step, "kind": kind, "seconds": round(seconds, 2), **values})
        if self.events is not None:
            self.events.scalars(step, values)
        if self.mlflow is not None:
            self.mlflow.metrics(step, values)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.events is not None:
            self.events.close()
        if self.mlflow is not None:
            self.mlflow.end(failed=kind is not None and not issubclass(kind, KeyboardInterrupt))
