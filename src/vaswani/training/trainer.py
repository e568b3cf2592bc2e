"""The one training loop that every task uses.

A task is a thin adapter (:class:`Task`): it owns the data, the loss and the
metrics; the trainer owns the rest: optimizer, schedule, accumulation,
clipping, autocast, logging, evaluation, checkpoints and exact resume.

Nothing is lost when training is stopped: SIGINT or SIGTERM finishes the current
step, writes a checkpoint and raises :class:`TrainingInterrupted`; a step with a
non-finite loss or gradient is skipped (and after ``max_bad_steps`` in a row
training stops, keeping the last good checkpoint); with ``deterministic`` a
resumed run ends bit-identical to an uninterrupted one on the CPU.
"""

from __future__ import annotations

import contextlib
import csv
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.batching import epoch_order
from vaswani.errors import RunDirError, TrainingInterrupted, VaswaniError
from vaswani.layers.blocks import set_grad_checkpointing
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device, seed_everything, set_threads, use_deterministic_mode
from vaswani.training.batches import to_device
from vaswani.training.checkpoint import load_checkpoint, newest_intact_checkpoint, save_checkpoint
from vaswani.training.compilation import compile_for_training
from vaswani.training.precision import Precision
from vaswani.training.progress import Progress, budget_note
from vaswani.training.schedules import learning_rate


class Task(Protocol):
    """What the trainer needs from a task."""

    def train_batches(self) -> list[Any]:
        """The fixed list of training batches; the trainer decides their order."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> tuple[Tensor, int]:
        """Summed loss of a batch and the number of items it sums over."""
        ...

    def batch_tokens(self, batch: Any) -> int:
        """Tokens processed for a batch (for tokens/s)."""
        ...

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics; must not consume random numbers."""
        ...


@dataclass
class TrainerState:
    """Where training stands; saved in each checkpoint."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    train_seconds: float = 0.0
    tokens: int = 0
    bad_steps: int = 0  # in a row, up to now
    skipped_steps: int = 0  # in all
    metrics: dict[str, float] = field(default_factory=dict)


STATE_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "dict[str, float]": dict,
}
"""The annotation of each :class:`TrainerState` field → the JSON values it accepts."""


def restored_state(saved: Any, path: Path) -> TrainerState:
    """The :class:`TrainerState` read from ``path`` (a checkpoint's ``trainer_state.json``), checked
    like a config: a field this vaswani does not know, or a value of another type, is a one-line
    :class:`~vaswani.errors.RunDirError`."""
    if not isinstance(saved, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    annotations = {f.name: str(f.type) for f in fields(TrainerState)}
    for name, value in saved.items():
        if name not in annotations:
            raise RunDirError(f"{path}: unknown field '{name}' (written by a newer vaswani? upgrade vaswani)")
        if isinstance(value, bool) or not isinstance(value, STATE_TYPES[annotations[name]]):
            raise RunDirError(f"{path}: field '{name}' must be {annotations[name]}, got {value!r}")
    return TrainerState(**saved)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW; weight decay applies to matrices only, never to biases, norms or
    (1-d) gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return kind(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)


class Trainer:
    """Trains ``model`` on ``task`` with ``cfg`` into ``run_dir``; ``task_name`` (a registered task,
    such as ``translation``) names it in the command printed to train on after a time budget."""

    def __init__(
        self, model: nn.Module, task: Task, cfg: TrainConfig, run_dir: Path, task_name: str = "TASK"
    ) -> None:
        if cfg.deterministic:
            use_deterministic_mode()
        elif cfg.threads is not None:
            set_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        self.precision = Precision(cfg.precision, self.device, cfg.tf32)
        self.model = model.to(self.device)
        if cfg.grad_checkpointing:
            set_grad_checkpointing(self.model)
        self.train_model = compile_for_training(self.model) if cfg.compile else self.model
        self.task = task
        self.cfg = cfg
        self.run_dir = run_dir
        self.files = RunDir(run_dir)
        self.task_name = task_name
        self.optimizer = make_optimizer(model, cfg)
        self.state = TrainerState()
        self.stop_signal: int | None = None
        self.batches = task.train_batches()
        if not self.batches:
            raise VaswaniError("no training batches: the training data is empty")
        if cfg.epochs is not None:  # the steps of that many passes, at most max_steps
            per_epoch = math.ceil(len(self.batches) / cfg.accumulate)
            self.cfg = cfg.replace(max_steps=min(cfg.max_steps, max(1, math.ceil(cfg.epochs * per_epoch))))

    def resume(self) -> None:
        """Continue from the newest intact checkpoint of the run directory (damaged newer ones
        are reported on stderr and skipped)."""
        checkpoint = newest_intact_checkpoint(self.run_dir)
        saved = load_checkpoint(checkpoint, self.model, self.optimizer)
        self.state = restored_state(saved, checkpoint / "trainer_state.json")

    def _next_batches(self) -> list[Any]:
        """The next ``accumulate`` batches; the position is part of the saved state."""
        out = []
        for _ in range(self.cfg.accumulate):
            order = epoch_order(len(self.batches), self.cfg.seed, self.state.epoch)
            out.append(self.batches[order[self.state.position]])
            self.state.position += 1
            if self.state.position == len(self.batches):
                self.state.epoch, self.state.position = self.state.epoch + 1, 0
        return out

    def _step(self) -> tuple[float, int, bool]:
        """One optimizer step over ``accumulate`` batches: (mean loss, tokens, applied).

        Each batch's summed loss is backpropagated at once (freeing its graph) and the
        gradients are divided by the item count of all of them at the end, so every token
        weighs the same however the batches are split."""
        micro = self._next_batches()
        self.model.train()
        loss_total, count = 0.0, 0
        for batch in micro:
            with self.precision.autocast():
                loss_sum, items = self.task.loss(self.train_model, to_device(batch, self.device))
            self.precision.backward(loss_sum)
            loss_total += float(loss_sum.detach())
            count += items
        count = max(1, count)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.div_(count)
        loss_value = loss_total / count
        self.precision.unscale(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm or math.inf)
        grad_ok = bool(torch.isfinite(norm))
        tokens = sum(self.task.batch_tokens(b) for b in micro)
        if not (math.isfinite(loss_value) and grad_ok):
            self.optimizer.zero_grad(set_to_none=True)
            return loss_value, tokens, False
        lr = learning_rate(
            self.cfg.schedule, self.state.step + 1, self.cfg.lr, self.cfg.warmup_steps,
            self._expected_steps(), self.cfg.min_lr,
        )  # fmt: skip
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.precision.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value, tokens, True

    def _expected_steps(self) -> int:
        """Where a decaying schedule should end: ``max_steps``, or sooner when ``max_minutes``
        will run out first, extrapolated from the pace so far (so a time-limited run still
        decays fully; such a run is not step-for-step reproducible, so a ``deterministic`` one
        keeps ``max_steps`` and lets the clock decide only where to stop)."""
        if self.cfg.max_minutes is None or self.cfg.deterministic or self.state.step < self.cfg.warmup_steps:
            return self.cfg.max_steps
        pace = self.state.step / max(self.state.train_seconds, 1e-9)
        return max(self.state.step + 1, min(self.cfg.max_steps, int(pace * self.cfg.max_minutes * 60)))

    def _evaluate(self) -> dict[str, float]:
        self.model.eval()
        with torch.no_grad(), self.precision.autocast():
            metrics = self.task.evaluate(self.model)
        self.model.train()
        return metrics

    def _log(self, row: dict[str, Any]) -> None:
        path = self.files.log
        new = not path.exists()
        with path.open("a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)

    def _checkpoint(self) -> None:
        state = self.state.__dict__.copy()
        save_checkpoint(self.run_dir, self.model, self.optimizer, state, self.cfg.keep_checkpoints)

    @contextlib.contextmanager
    def _stop_requests(self) -> Iterator[None]:
        """While training, SIGINT and SIGTERM only set ``stop_signal`` (checked after each step);
        a second one stops at once with KeyboardInterrupt. The previous handlers come back after.
        An ignored signal stays ignored (a background job's SIGINT), and handlers can only be
        installed from the main thread: elsewhere the signals keep theirs."""

        def request(signum: int, frame: Any) -> None:
            if self.stop_signal is not None:
                raise KeyboardInterrupt
            self.stop_signal = signum

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            s: signal.signal(s, request)
            for s in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(s) is not signal.SIG_IGN
        }
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler or signal.SIG_DFL)  # None: a handler set outside Python

    def _skipped(self, progress: Progress, loss: float) -> None:
        """Count a step whose loss or gradient was not finite; stop after ``max_bad_steps`` in a row."""
        state = self.state
        state.bad_steps += 1
        state.skipped_steps += 1
        progress.write(
            f"step {state.step + 1}: non-finite loss or gradient (loss {loss:.4g}); update skipped "
            f"({state.bad_steps} in a row, {state.skipped_steps} in all)"
        )
        if state.bad_steps >= self.cfg.max_bad_steps:
            checkpoints = self.files.checkpoints
            kept = f"last good checkpoint in {checkpoints}" if checkpoints.is_dir() else "no checkpoint yet"
            raise VaswaniError(
                f"{state.bad_steps} steps in a row had a non-finite loss or gradient; stopping at step "
                f"{state.step} ({kept}); try a lower lr, a longer warmup or gradient clipping"
            )

    def _evaluate_and_log(self, progress: Progress, train_loss: float) -> None:
        """Validation metrics, kept in the state and logged: a row of ``train_log.csv`` and a line."""
        state = self.state
        state.metrics = self._evaluate()
        self._log(
            {
                "step": state.step,
                "seconds": round(state.train_seconds, 2),
                "lr": self.optimizer.param_groups[0]["lr"],
                "train_loss": round(train_loss, 5),
                **{k: round(v, 5) for k, v in state.metrics.items()},
            }
        )
        progress.write(f"step {state.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in state.metrics.items()))

    def fit(self, quiet: bool = False) -> dict[str, Any]:
        """Train until ``max_steps`` or ``max_minutes``; return the final metrics."""
        cfg, state = self.cfg, self.state
        budget = None if cfg.max_minutes is None else cfg.max_minutes * 60.0
        progress = Progress(cfg.max_steps, budget, state.step, quiet)
        smoothed = None
        window_tokens, window_start = 0, time.perf_counter()
        last = time.perf_counter()
        self.stop_signal = None
        with progress, self._stop_requests():
            while state.step < cfg.max_steps and (budget is None or state.train_seconds < budget):
                loss, tokens, applied = self._step()
                now = time.perf_counter()
                state.train_seconds += now - last
                last = now
                saved = False
                if not applied:
                    self._skipped(progress, loss)
                else:
                    state.bad_steps = 0
                    state.step += 1
                    state.tokens += tokens
                    window_tokens += tokens
                    smoothed = loss if smoothed is None else 0.95 * smoothed + 0.05 * loss
                    elapsed = now - window_start
                    progress.update(
                        state.step, state.train_seconds, smoothed, self.optimizer.param_groups[0]["lr"],
                        window_tokens / max(elapsed, 1e-9),
                    )  # fmt: skip
                    done = state.step >= cfg.max_steps or (
                        budget is not None and state.train_seconds >= budget
                    )
                    if state.step % cfg.eval_every == 0 or done:
                        self._evaluate_and_log(progress, smoothed)
                        last = time.perf_counter()
                        window_tokens, window_start = 0, last
                    saved = bool(cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0) or done
                    if saved:
                        self._checkpoint()
                        last = time.perf_counter()
                if self.stop_signal is not None:
                    if not saved:
                        self._checkpoint()
                    self.files.save_weights(self.model)
                    raise TrainingInterrupted(self.stop_signal, state.step, self.run_dir)
        if not state.metrics:
            state.metrics = self._evaluate()
        self.files.save_weights(self.model)
        result = {
            **state.metrics,
            "train_seconds": round(state.train_seconds, 2),
            "steps": state.step,
            "skipped_steps": state.skipped_steps,
            "tokens_per_second": round(state.tokens / max(state.train_seconds, 1e-9), 1),
        }
        self.files.write_metrics(result)
        if cfg.max_minutes is not None and state.train_seconds >= cfg.max_minutes * 60:
            note = budget_note(
                state.step, cfg.max_steps, cfg.max_minutes, state.train_seconds, self.task_name, self.run_dir
            )
            if note is not None:
                print(note)
        return result


def fit_run(
    run: RunConfig,
    run_dir: Path,
    task: Task,
    build_model: Callable[[], nn.Module],
    save_files: Callable[[Path], None],
    resume: bool = False,
    quiet: bool = False,
) -> tuple[dict[str, Any], nn.Module]:
    """What every task's training shares once its data and tokenizers are ready: seed, build the
    model, and either write a new run directory (``save_files`` writes the task's own files, such
    as tokenizers, then ``config.json``) or continue from its newest checkpoint; then train.
    Returns the final metrics and the trained model."""
    seed_everything(run.train.seed)
    model = build_model()
    if not resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_files(run_dir)
        RunDir(run_dir).write_config(run)
    trainer = Trainer(model, task, run.train, run_dir, run.task)
    if resume:
        trainer.resume()
        RunDir(run_dir).write_config(run)  # with the resume's changes, for the next resume
    return trainer.fit(quiet=quiet), model
