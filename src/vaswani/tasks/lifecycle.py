"""The life of a run: a new run's directory made and held (:func:`new_run`), a stopped run held and
continued (:func:`resumed_run`, :func:`resume`), a budget already spent refused, and a new run
that failed before its first checkpoint removed. The task's own training is found in the registry.

Under several processes the main one (rank 0) takes the run directory's lock and tells the others
what it chose or why it refused (:func:`_held`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from vaswani.config import RunConfig
from vaswani.errors import RunDirError, TrainingInterrupted, VaswaniError
from vaswani.rundir import RunDir, RunLock
from vaswani.tasks.registry import TaskSpec, get
from vaswani.training import distributed
from vaswani.training.checkpoint import checkpoint_problem, list_checkpoints
from vaswani.training.state import restored_state


def resume(
    run_dir: str | Path, quiet: bool = False, task: str | None = None, **train_changes: Any
) -> tuple[Any, ...]:
    """Continue the stopped run ``run_dir`` from its newest intact checkpoint, with its own saved
    config (with ``task``, a run of another task is refused). ``train_changes`` (e.g.
    ``max_steps=...``) may extend it; they are saved in the config, so that a later plain resume
    keeps them. Returns what the task's training returns."""
    with resumed_run(run_dir, task, **train_changes) as (spec, run, device):
        assert spec.train is not None
        return spec.train(run, Path(run_dir), resume=True, quiet=quiet, device=device)


@contextlib.contextmanager
def resumed_run(
    run_dir: str | Path, task: str | None = None, **train_changes: Any
) -> Iterator[tuple[TaskSpec, RunConfig, torch.device]]:
    """The entry, the config (with ``train_changes``) and this process's device (resolved here,
    once, and handed to the task's training) of the stopped run ``run_dir``, held
    (:meth:`RunDir.lock`, by the main process) for the block. A run already at its step or time
    budget is refused in one line, before any data is read."""
    folder = RunDir(run_dir)
    spec = get(folder.read_config(task).task, run_dir)
    run = folder.read_config(task, spec.data)
    if spec.train is None:
        raise RunDirError(
            f"{run_dir}: a run of task {spec.name!r} is not trained by vaswani; nothing to resume"
        )
    if "max_steps" in train_changes:  # a new step budget replaces a budget of epochs
        train_changes = {"epochs": None, **train_changes}
    resumed = RunConfig(run.task, run.model, run.train.replace(**train_changes), run.data)
    place, device = distributed.start(resumed.train.device)

    def take() -> RunLock:
        folder.check_not_held()  # a run in use is said first; then refusals that leave it as it was
        budget_left(folder.path, resumed)
        return folder.lock()

    with _held(place, take):
        yield spec, resumed, device


def budget_left(run_dir: Path, run: RunConfig) -> None:
    """Refuse, in one line, a resume of a run whose newest intact checkpoint is already at
    ``max_steps`` (or past ``max_minutes``): it would train nothing."""
    train = run.train
    for path in reversed(list_checkpoints(run_dir)):
        step = int(path.name.removeprefix("step_"))
        if step < train.max_steps and train.max_minutes is None:
            return
        if checkpoint_problem(path) is not None:  # newest_intact_checkpoint says so, and goes on
            continue
        file = path / "trainer_state.json"  # intact: as it was written
        try:
            state = restored_state(json.loads(file.read_text(encoding="utf-8")), file)
        except OSError:  # removed meanwhile: the run is trained by another process, which the lock finds
            continue
        step, minutes = state.step, state.train_seconds / 60
        if step >= train.max_steps:
            raise RunDirError(
                f"{run_dir}: already at step {step} of max_steps {train.max_steps}: nothing to train; "
                f"give --max-steps above {step} to train more"
            )
        if train.max_minutes is not None and minutes >= train.max_minutes:
            raise RunDirError(
                f"{run_dir}: already trained {minutes:.2f} minutes of max_minutes {train.max_minutes}: "
                "nothing to train; give a larger --max-minutes to train more"
            )
        return


@contextlib.contextmanager
def _held(place: distributed.World, take: Callable[[], RunLock]) -> Iterator[RunLock | None]:
    """``take()`` (a run directory's lock) in the main process, its refusal told to every process;
    the lock (None in the others) is let go after the block."""
    lock, error = None, None
    if place.main:
        try:
            lock = take()
        except VaswaniError as exc:
            error = str(exc)
    error = distributed.from_main(place, error)
    if error is not None:
        raise RunDirError(error)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


@contextlib.contextmanager
def new_run(out: str | Path | None, task: str, device: str = "auto") -> Iterator[tuple[Path, torch.device]]:
    """The directory of a new run of ``task``, and this process's device (``device`` resolved here,
    once, and handed to the task's training): ``out`` (new or empty; default
    ``runs/TASK-DATE-TIME``), made and held for the block (:meth:`RunDir.create`) before any data
    is read. Under several processes the main one makes it and tells the others (after joining
    the process group for ``device``). A failure in the block leaves no unusable run: one without
    a checkpoint is removed (once training had begun, its error, or a note, says so); one with a
    checkpoint stays, and its error (or a note, after a KeyboardInterrupt) says how to resume it."""
    place, resolved = distributed.start(device)
    chosen: list[Path] = []

    def create() -> RunLock:
        folder, lock = RunDir.create(Path(out) if out is not None else None, task)
        chosen.append(folder.path)
        return lock

    with _held(place, create) as lock:
        path = distributed.from_main(place, str(chosen[0]) if chosen else None)
        try:
            yield Path(path), resolved
        except BaseException as exc:
            said = _after_failure(RunDir(path), lock, task, exc) if lock is not None else None
            if said is None:
                raise
            if isinstance(exc, VaswaniError) and not isinstance(exc, TrainingInterrupted):
                raise type(exc)(f"{exc}; {said}") from None  # still one line
            print(f"vaswani: note: {said}", file=sys.stderr)
            raise


def _after_failure(folder: RunDir, lock: RunLock, task: str, exc: BaseException) -> str | None:
    """Remove a new run that failed before its first checkpoint; what became of it, where that
    is news (None: nothing had been written but the empty folder, or the run is finished or
    interrupted with a checkpoint, which its own message says)."""
    begun = folder.config_path.is_file()
    if folder.remove_stub(lock):
        return f"removed {folder}: it had no checkpoint to resume from" if begun else None
    if folder.path.is_dir() and not (isinstance(exc, TrainingInterrupted) or folder.metrics_path.is_file()):
        return f"{folder} keeps its checkpoints; continue with: vaswani train {task} --resume {folder}"
    return None


def train(run: RunConfig, out: str | Path | None = None, quiet: bool = False) -> tuple[Any, ...]:
    """Train a new run of ``run.task`` in ``out`` (:func:`new_run`) and return what the task's
    training returns (metrics first, then the trained wrapper). Under several processes (torchrun)
    every one calls it."""
    spec = get(run.task)
    if spec.train is None:
        raise RunDirError(f"runs of task {run.task!r} are not trained by vaswani")
    with new_run(out, run.task, run.train.device) as (run_dir, device):
        return spec.train(run, run_dir, resume=False, quiet=quiet, device=device)
