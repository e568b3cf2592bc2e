"""The one training loop that every task uses.

A task is a thin adapter (:class:`Task`): it owns the data, the loss and the
metrics; the trainer owns the rest: the device, optimizer, schedule, accumulation,
clipping, precision, processes, logging, evaluation, checkpoints and exact resume.

Nothing is lost when training is stopped: SIGINT or SIGTERM finishes the current
step, writes a checkpoint and raises :class:`TrainingInterrupted`; a step with a
non-finite loss or gradient is skipped (and after ``max_bad_steps`` in a row
training stops, keeping the last good checkpoint); with ``deterministic`` a
resumed run ends bit-identical to an uninterrupted one on the CPU.

Under several processes (:mod:`vaswani.training.distributed`) each takes its rows of every global
batch; the loss is summed over all of them and the gradients divided by the items of the global
batch, so that every token weighs the same as in one process. All processes agree each step on
whether to stop (a signal to any of them) and on the time spent (the slowest's); the main one
evaluates, logs and writes.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import save
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.batching import epoch_order
from vaswani.errors import ConfigError, TrainingInterrupted, VaswaniError
from vaswani.io import WEIGHTS, load_weights, model_bytes
from vaswani.layers.blocks import set_grad_checkpointing
from vaswani.layers.lora import adapter_state, apply_lora, merged_copy
from vaswani.rundir import RunDir
from vaswani.runtime import seed_everything, set_threads, use_deterministic_mode
from vaswani.training import distributed, memory
from vaswani.training.batches import rows_of_process, take_rows, to_device
from vaswani.training.checkpoint import (
    newest_intact_checkpoint,
    read_checkpoint,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from vaswani.training.compilation import compile_for_training
from vaswani.training.distributed import World
from vaswani.training.optimizer import make_optimizer
from vaswani.training.precision import Precision
from vaswani.training.progress import Progress, budget_note
from vaswani.training.schedules import budget_plan, cosine_at, learning_rate
from vaswani.training.selection import update_best
from vaswani.training.signals import stop_requests
from vaswani.training.state import TrainerState, restored_state
from vaswani.training.tracking import Tracker, Window

PLAN_STEPS = 4
"""Steps timed before a time budget plans the schedule (:meth:`Trainer._schedule`)."""


class Task(Protocol):
    """What the trainer needs from a task."""

    def train_batches(self) -> Sequence[Any]:
        """The fixed training batches (a list, or a sequence that builds each when read); the
        trainer orders them and cuts each into the processes' rows (``batches.take_rows``, or the
        task's own ``take_rows(batch, start, stop)`` where its batches are not cut that way)."""
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


class Trainer:
    """Trains ``model`` on ``task`` with ``cfg`` into ``run_dir``; ``task_name`` (a registered task,
    such as ``translation``) names it in the command printed to train on after a time budget.
    ``place`` and ``device`` are this process's (:func:`vaswani.training.distributed.start`; one
    process on ``cfg.device`` by default); ``resume_from`` is a checkpoint to continue from."""

    def __init__(
        self,
        model: nn.Module,
        task: Task,
        cfg: TrainConfig,
        run_dir: Path,
        task_name: str = "TASK",
        place: World | None = None,
        device: torch.device | None = None,
        resume_from: Path | None = None,
    ) -> None:
        if cfg.deterministic:
            use_deterministic_mode()
        elif cfg.threads is not None:
            set_threads(cfg.threads)
        self.place = place or World()
        self.device = device or distributed.process_device(cfg.device, self.place)
        self.precision = Precision(cfg.precision, self.device, cfg.tf32)
        saved = None
        if resume_from is not None:  # the weights go into the whole model, before any sharding
            load_weights(model, resume_from / WEIGHTS)
            saved = read_checkpoint(resume_from)
        self.model = model.to(self.device)
        if cfg.grad_checkpointing:
            set_grad_checkpointing(self.model)
        compiler = compile_for_training if cfg.compile else None
        unused = getattr(task, "unused_parameters", False)
        self.train_model = distributed.wrap(self.model, self.place, self.device, cfg.fsdp, unused, compiler)
        self.sharded = distributed.is_sharded(self.model)
        self.task = task
        self.cfg = cfg
        self.run_dir = run_dir
        self.files = RunDir(run_dir)
        self.task_name = task_name
        self.optimizer = make_optimizer(self.model, cfg)
        self.state = TrainerState()
        self._timed_from: tuple[int, float] | None = None  # (step, train_seconds) where pacing starts
        self._pace: float | None = None  # this fit's mean training seconds a step, once timed
        self.stop_signal: int | None = None
        self.batches = task.train_batches()
        self.take_rows = getattr(task, "take_rows", take_rows)
        if not self.batches:
            raise VaswaniError("no training batches: the training data is empty")
        if cfg.epochs is not None:  # the steps of that many passes, at most max_steps
            per_epoch = math.ceil(len(self.batches) / cfg.accumulate)
            self.cfg = cfg.replace(max_steps=min(cfg.max_steps, max(1, math.ceil(cfg.epochs * per_epoch))))
        if saved is not None and resume_from is not None:
            self._restore(*saved, resume_from)

    def _restore(self, extra: dict[str, Any], state: dict[str, Any], path: Path) -> None:
        """A checkpoint's optimizer, scaler, RNG and trainer states; each process takes its own RNG
        states where the checkpoint has them (written by as many processes)."""
        distributed.load_optimizer_state(self.optimizer, extra["optimizer"])
        self.precision.load_state_dict(extra.get("scaler", {}))
        by_rank = extra.get("rng_by_rank")
        own = by_rank[self.place.rank] if by_rank and len(by_rank) == self.place.size else None
        if own is None and self.place.rank > 0:  # more processes than wrote it: a fresh stream each
            torch.manual_seed(self.cfg.seed + 1000 * self.place.rank + int(state.get("step", 0)))
        else:
            set_rng_state(own or extra["rng"], self.device)
        self.state = restored_state(state, path / "trainer_state.json")

    def _next_batches(self) -> list[Any]:
        """The next ``accumulate`` global batches; the position is part of the saved state."""
        out = []
        for _ in range(self.cfg.accumulate):
            order = epoch_order(len(self.batches), self.cfg.seed, self.state.epoch)
            out.append(self.batches[order[self.state.position]])
            self.state.position += 1
            if self.state.position == len(self.batches):
                self.state.epoch, self.state.position = self.state.epoch + 1, 0
        return out

    def _step(self) -> tuple[float, int, float, str]:
        """One optimizer step over ``accumulate`` batches: (mean loss, tokens, gradient norm before
        clipping, what happened: ``applied``, ``skipped`` (a non-finite loss or gradient) or
        ``overflow`` (fp16's scaler lowered its scale)).

        Each batch's summed loss is backpropagated at once (freeing its graph) and the
        gradients are divided by the item count of all of them at the end, so every token
        weighs the same however the batches are split (and across processes: those are
        reduced only on the last batch's backward pass)."""
        micro = self._next_batches()
        self.train_model.train()
        loss_total, count, tokens = 0.0, 0, 0
        for i, batch in enumerate(micro):
            rows, real = rows_of_process(batch, self.place.rank, self.place.size, self.take_rows)
            with distributed.gradient_sync(self.train_model, i == len(micro) - 1):
                with self.precision.autocast():
                    loss_sum, items = self.task.loss(self.train_model, to_device(rows, self.device))
                if not real:
                    loss_sum, items = loss_sum * 0.0, 0
                self.precision.backward(loss_sum)
            loss_total += float(loss_sum.detach())
            count += items
            tokens += self.task.batch_tokens(rows) if real else 0
        sums = distributed.reduced(self.place, [loss_total, count, tokens], self.device)
        loss_total, count, tokens = sums[0], max(1, int(sums[1])), int(sums[2])
        for p in self.model.parameters():
            if p.grad is not None:
                if self.place.many:  # DDP and FSDP average over processes: back to the sum
                    p.grad.mul_(self.place.size)
                p.grad.div_(count)
        loss_value = loss_total / count
        self.precision.unscale(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm or math.inf)
        norm_value = float(distributed.local(norm))
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            self.optimizer.zero_grad(set_to_none=True)
            scaled = self.precision.overflowed()  # fp16's scaler lowers its scale on any skipped step
            what = "overflow" if scaled and math.isfinite(loss_value) else "skipped"
            return loss_value, tokens, norm_value, what
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.precision.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value, tokens, norm_value, "applied"

    def _learning_rate(self) -> float:
        """The next step's learning rate: the config's schedule by step, or, when ``max_minutes``
        will end the run first (:meth:`_schedule`), a cosine decay that follows the training time:
        its progress is the share of the budget spent by the end of the next step (at this fit's
        pace) since warmup ended, so that the rate reaches its floor as the time runs out however
        the pace changes on the way (another job starting beside the run, a resume on another
        machine), where a decay by steps planned from the first steps' pace would end early, or
        late."""
        cfg, state = self.cfg, self.state
        warmup, total = self._schedule()
        step, plan = state.step + 1, state.schedule_plan
        if not (cfg.schedule == "cosine" and plan and total < cfg.max_steps and step > warmup):
            return learning_rate(cfg.schedule, step, cfg.lr, warmup, total, cfg.min_lr)
        assert cfg.max_minutes is not None
        start = plan.setdefault("decay_from", state.train_seconds)  # the training seconds at warmup's end
        spent = state.train_seconds + (self._pace or 0.0) - start
        return cosine_at(spent / max(cfg.max_minutes * 60 - start, 1e-9), cfg.lr, cfg.min_lr)

    def _schedule(self) -> tuple[int, int]:
        """The schedule's (warmup, total steps): the config's, or, when ``max_minutes`` will end the
        run first, a plan sized to the budget (:func:`~vaswani.training.schedules.budget_plan`).
        The plan is made once, from the pace of :data:`PLAN_STEPS` steps after this fit's first
        (which pays for warm-up work), and kept in the state: a resumed run keeps its warmup (unless
        the resume changed the budget: a new plan, whose decay goes on from where it was). The pace
        is measured on, for :meth:`_learning_rate`'s decay."""
        cfg, state = self.cfg, self.state
        if cfg.max_minutes is None:
            return cfg.warmup_steps, cfg.max_steps
        if self._timed_from is None:  # the first step of this fit: timing starts once it is done
            self._timed_from = (state.step + 1, math.nan)
        elif state.step == self._timed_from[0]:
            self._timed_from = (state.step, state.train_seconds)
        timed = state.step - self._timed_from[0]
        if timed >= PLAN_STEPS:
            self._pace = (state.train_seconds - self._timed_from[1]) / timed
        budget = {
            "max_minutes": cfg.max_minutes,
            "max_steps": cfg.max_steps,
            "warmup_steps": cfg.warmup_steps,
        }
        plan = state.schedule_plan
        if plan and all(plan.get(key) == value for key, value in budget.items()):
            return int(plan["warmup"]), int(plan["total"])
        if self._pace is None:
            return cfg.warmup_steps, cfg.max_steps
        left = cfg.max_minutes * 60 - state.train_seconds
        warmup, total = budget_plan(state.step, self._pace, left, cfg.max_steps, cfg.warmup_steps)
        kept = {"decay_from": plan["decay_from"]} if "decay_from" in plan else {}
        state.schedule_plan = {"warmup": warmup, "total": total, **budget, **kept}
        return warmup, total

    def _evaluate(self) -> dict[str, float]:
        """Validation metrics, on every process: computed by the main one (by all of them when
        the model is sharded, as each forward pass needs every shard)."""
        metrics: dict[str, float] = {}
        if self.place.main or self.sharded:
            self.model.eval()
            with torch.no_grad(), self.precision.autocast(), distributed.unsharded(self.model):
                metrics = self.task.evaluate(self.model)
            self.model.train()
        return distributed.from_main(self.place, metrics)

    def _checkpoint(self) -> None:
        """Every process's part of a checkpoint (the whole weights and optimizer state, each one's
        RNG states), written by the main process; the others wait until it is in place."""
        whole = self.place.main or self.sharded  # gathering a sharded state needs every process
        weights = model_bytes(self.model) if whole else b""
        optimizer = distributed.whole_optimizer_state(self.optimizer) if whole else {}
        rngs = distributed.gathered(self.place, rng_state(self.device))
        if self.place.main:
            extra = {"optimizer": optimizer, "rng": rngs[0], "scaler": self.precision.state_dict()}
            if self.place.many:
                extra["rng_by_rank"] = rngs
            write_checkpoint(
                self.run_dir, weights, extra, self.state.__dict__.copy(), self.cfg.keep_checkpoints
            )
        distributed.barrier(self.place)

    def _save_weights(self, best: dict[str, str] | None = None) -> None:  # best: model.best's metadata
        """``model.safetensors`` (or, with ``best``, ``model.best.safetensors``): the weights with
        any LoRA adapters merged, so that every command reads a LoRA run as any other; beside
        ``model.safetensors``, the adapters alone in ``adapter.safetensors`` (:func:`lora_bytes`)."""
        whole = self.place.main or self.sharded
        weights = model_bytes(merged_copy(self.model), best) if whole else b""
        if self.place.main:
            (self.files.write_weights if best is None else self.files.write_best)(weights)
            if best is None and self.cfg.lora_rank is not None:
                self.files.write_adapter(lora_bytes(self.model, self.cfg))
        distributed.barrier(self.place)

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

    def _evaluate_and_log(self, progress: Progress, tracker: Tracker) -> None:
        """Validation metrics, kept in the state and logged: an ``eval`` row and a line."""
        state = self.state
        state.metrics = self._evaluate()
        if self.cfg.select_by is not None and (best := update_best(self.cfg.select_by, state)) is not None:
            self._save_weights(best)
        if not self.place.main:
            return
        tracker.log(
            "eval", state.step, state.train_seconds, {k: round(v, 5) for k, v in state.metrics.items()}
        )
        progress.write(f"step {state.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in state.metrics.items()))

    def _agreed(self, seconds: float) -> float:
        """The step's seconds of the slowest process, and a stop asked of any process taken by all
        (so that every process stops at the same step)."""
        agreed = distributed.reduced(self.place, [self.stop_signal or 0, seconds], self.device, "max")
        if agreed[0]:
            self.stop_signal = int(agreed[0])
        return agreed[1]

    def fit(self, quiet: bool = False) -> dict[str, Any]:
        """Train until ``max_steps`` or ``max_minutes``; return the final metrics."""
        cfg, state = self.cfg, self.state
        budget = None if cfg.max_minutes is None else cfg.max_minutes * 60.0
        progress = Progress(cfg.max_steps, budget, state.step, quiet or not self.place.main)
        smoothed = None
        window_tokens, window_start = 0, time.perf_counter()
        last = time.perf_counter()
        self.stop_signal = None
        window = Window(state.window, state.train_seconds)
        with (
            progress,
            Tracker(self.files, cfg.tensorboard, state.step, self.place.main, cfg.mlflow) as tracker,
            stop_requests(self, (lambda: state.step + 1) if self.place.main else None),
        ):
            while state.step < cfg.max_steps and (budget is None or state.train_seconds < budget):
                loss, tokens, norm, outcome = memory.guarded(self._step, self.task, self.cfg, state.step)
                now = time.perf_counter()
                state.train_seconds += self._agreed(now - last)
                last = now
                saved = False
                if outcome == "skipped":
                    self._skipped(progress, loss)
                elif outcome == "applied":
                    state.bad_steps = 0
                    state.step += 1
                    state.tokens += tokens
                    window_tokens += tokens
                    window.add(loss, norm, tokens)
                    smoothed = loss if smoothed is None else 0.95 * smoothed + 0.05 * loss
                    elapsed = now - window_start
                    progress.update(
                        state.step,
                        state.train_seconds,
                        smoothed,
                        self.optimizer.param_groups[0]["lr"],
                        window_tokens / max(elapsed, 1e-9),
                    )
                    done = state.step >= cfg.max_steps or (
                        budget is not None and state.train_seconds >= budget
                    )
                    if state.step % cfg.log_every == 0 or done:
                        lr = self.optimizer.param_groups[0]["lr"]
                        tracker.log(
                            "train", state.step, state.train_seconds, window.row(lr, state.train_seconds)
                        )
                    if state.step % cfg.eval_every == 0 or done:
                        self._evaluate_and_log(progress, tracker)
                        last = time.perf_counter()
                        window_tokens, window_start = 0, last
                    saved = bool(cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0) or done
                    if saved:
                        self._checkpoint()
                        last = time.perf_counter()
                if self.stop_signal is not None:
                    if not saved:
                        self._checkpoint()
                    self._save_weights()
                    raise TrainingInterrupted(self.stop_signal, state.step, self.run_dir)
        if not state.metrics:
            state.metrics = self._evaluate()
        self._save_weights()
        result = {
            **state.metrics,
            "train_seconds": round(state.train_seconds, 2),
            "steps": state.step,
            "skipped_steps": state.skipped_steps,
            "tokens_per_second": round(state.tokens / max(state.train_seconds, 1e-9), 1),
            "processes": self.place.size,
        }
        if self.place.main:
            self.files.write_metrics(result)
        if self.place.main and cfg.max_minutes is not None and state.train_seconds >= cfg.max_minutes * 60:
            note = budget_note(
                state.step, cfg.max_steps, cfg.max_minutes, state.train_seconds, self.task_name, self.run_dir
            )
            if note is not None:
                print(note)
        return result


def lora_bytes(model: nn.Module, cfg: TrainConfig) -> bytes:
    """The trained tensors of a LoRA model (:func:`~vaswani.layers.lora.adapter_state`) as
    safetensors bytes, with the rank, alpha, dropout and targets in the header."""
    settings = {
        "lora_rank": str(cfg.lora_rank),
        "lora_alpha": str(cfg.lora_alpha),
        "lora_dropout": str(cfg.lora_dropout),
        "lora_targets": ",".join(cfg.lora_targets),
    }
    return save({k: v.cpu().contiguous() for k, v in adapter_state(model).items()}, settings)


def adapted(run: RunConfig, model: nn.Module) -> nn.Module:
    """``model`` with the LoRA adapters of ``run.train`` (:func:`~vaswani.layers.lora.apply_lora`:
    the base frozen, a new ``head`` trained in full), or as it is without ``lora_rank``. Adapters
    train a pretrained model: a run that does not start from one (``data.init``) is refused."""
    cfg = run.train
    if cfg.lora_rank is None:
        return model
    if getattr(run.data, "init", None) is None:
        raise ConfigError("--lora: adapters train a pretrained model: start from one with --init RUN_DIR")
    apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets)
    return model


def fit_run(
    run: RunConfig,
    run_dir: Path,
    task: Task,
    build_model: Callable[[], nn.Module],
    save_files: Callable[[Path], None],
    resume: bool = False,
    quiet: bool = False,
    device: torch.device | None = None,
) -> tuple[dict[str, Any], nn.Module]:
    """What every task's training shares once its data and tokenizers are ready: seed, build the
    model, and either write a new run directory (``save_files`` writes the task's own files, such
    as tokenizers, then ``config.json``) or continue from its newest checkpoint; then train.
    Under several processes the main one writes the files, once every process is seen to have
    built the same (``distributed.same_files``). ``device`` is this process's, as the run's
    lifecycle resolved it (:mod:`vaswani.tasks.lifecycle`; None: resolved here from
    ``run.train.device``). Returns the final metrics and the trained model."""
    if device is None:
        place, device = distributed.start(run.train.device)
    else:
        place = distributed.world()
    if run.train.fsdp and not place.many:  # a sharded run resumed on one process
        print("vaswani: note: fsdp on one process: nothing to shard", file=sys.stderr)
    seed_everything(run.train.seed)
    model = adapted(run, memory.built(run, device, build_model))  # once it is seen to fit in memory
    if place.rank > 0:  # each process its own dropout masks (the weights are the same: seeded above)
        torch.manual_seed(run.train.seed + 1000 * place.rank)
    checkpoint = None
    if resume:
        checkpoint = distributed.from_main(place, newest_intact_checkpoint(run_dir) if place.main else None)
    else:
        distributed.same_files(place, save_files)
        if place.main:
            run_dir.mkdir(parents=True, exist_ok=True)
            save_files(run_dir)
            RunDir(run_dir).write_config(run)
        distributed.barrier(place)
    trainer = Trainer(model, task, run.train, run_dir, run.task, place, device, checkpoint)
    if resume and place.main:
        RunDir(run_dir).write_config(run)  # with the resume's changes, for the next resume
    result = trainer.fit(quiet=quiet)
    if trainer.sharded:  # each process holds a shard: the whole trained model, from its weights
        model = RunDir(run_dir).load_weights(build_model()).to(device)
    return result, merged_copy(model)
