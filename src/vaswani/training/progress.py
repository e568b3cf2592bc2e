"""The trainer's progress display: a bar on a terminal, plain lines in a log.

The display counts toward the step at which training will actually stop: ``max_steps``, or, with a
time budget, the step at which the pace so far runs the budget out (:func:`expected_end`), so that
its ETA is the run's. On a terminal (stderr is a tty) that is a tqdm bar. Written to a file or a
pipe, the bar's carriage-return updates would flood the log, so a plain line is printed instead
every :data:`LINE_SECONDS` seconds and once at the end::

    step 120/623  loss 3.412  lr 1.00e-03  tokens/s 12,345  elapsed 0:41  eta 2:49

Evaluation and warning lines go to stdout through :meth:`Progress.write`, beside the display.

Data preparation before training (generating the default corpus, training tokenizers) shows its
stages the same way (:class:`Stage`): a bar on a terminal, a plain line as each starts and ends
in a log.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TextIO

from tqdm import tqdm

LINE_SECONDS = 10.0
"""Seconds between two plain progress lines (output that is not a terminal)."""

SHORT = 0.9
"""A time budget that ends training before this fraction of ``max_steps`` gets a closing note."""


def expected_end(step: int, train_seconds: float, max_steps: int, budget: float | None) -> int:
    """The step at which training stops: ``max_steps``, or sooner where the time ``budget`` (in
    seconds of training) runs out first at the pace so far, ``step`` steps in ``train_seconds``:
    ``min(max_steps, step + ⌈(budget − train_seconds) · step / train_seconds⌉)``."""
    if budget is None or step == 0 or train_seconds <= 0:
        return max_steps
    remaining = max(0.0, budget - train_seconds)
    return min(max_steps, step + math.ceil(remaining * step / train_seconds))


def clock(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS``, or ``M:SS`` under an hour."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """The display of one :meth:`~vaswani.training.trainer.Trainer.fit`, from step ``step`` on.

    ``budget`` is the time budget in seconds of training (None: ``max_steps`` alone ends the run);
    ``quiet`` shows nothing but the lines given to :meth:`write`. Use it as a context manager.
    """

    def __init__(
        self,
        max_steps: int,
        budget: float | None,
        step: int,
        quiet: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        self.max_steps, self.budget, self.quiet = max_steps, budget, quiet
        self.stream = sys.stderr if stream is None else stream
        self.start_step = step
        self.started = self.last_line = time.perf_counter()
        self.pending: str | None = None  # the newest plain line, not printed yet
        self.bar: tqdm | None = None
        if not quiet and self.stream.isatty():
            total = max_steps if budget is None else None  # with a time budget: unknown until the pace is
            self.bar = tqdm(
                total=total,
                initial=step,
                desc="train",
                unit="step",
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(
        self, step: int, train_seconds: float, loss: float, lr: float, tokens_per_second: float
    ) -> None:
        """Show that step ``step`` is done, after ``train_seconds`` of training in all."""
        if self.quiet:
            return
        end = expected_end(step, train_seconds, self.max_steps, self.budget)
        if self.bar is not None:
            self.bar.total = end
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_second:,.0f}")
            return
        now = time.perf_counter()
        elapsed = now - self.started
        pace = (step - self.start_step) / max(elapsed, 1e-9)
        eta = (end - step) / pace if pace > 0 else 0.0
        self.pending = (
            f"step {step}/{end}  loss {loss:.3f}  lr {lr:.2e}  tokens/s {tokens_per_second:,.0f}  "
            f"elapsed {clock(elapsed)}  eta {clock(eta)}"
        )
        if now - self.last_line >= LINE_SECONDS:
            self._print_pending()
            self.last_line = now

    def write(self, line: str) -> None:
        """Print ``line`` on stdout without breaking the bar."""
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        """End the bar, or print the last plain line."""
        if self.bar is not None:
            self.bar.close()
        self._print_pending()

    def _print_pending(self) -> None:
        if self.pending is not None:
            print(self.pending, file=self.stream, flush=True)
            self.pending = None


def budget_note(
    step: int, max_steps: int, max_minutes: float, train_seconds: float, task: str, run_dir: Path
) -> str | None:
    """The closing lines of a run that its time budget (``max_minutes``) stopped before
    :data:`SHORT` of ``max_steps``: what happened, and the command that trains on to ``max_steps``
    (with a time budget that leaves a quarter more than the pace so far needs, since a resumed run
    keeps counting its minutes); None for a run that got that far."""
    if step >= SHORT * max_steps:
        return None
    total = train_seconds / 60 * max_steps / max(step, 1)
    command = shlex.join(
        [
            "vaswani",
            "train",
            task,
            "--resume",
            str(run_dir),
            "--max-steps",
            str(max_steps),
            "--max-minutes",
            str(math.ceil(1.25 * total)),
        ]
    )
    return (
        f"training stopped at step {step} of {max_steps} (max_steps): the time budget of {max_minutes:g} "
        f"minutes ran out. To train on to step {max_steps} (about "
        f"{max(0.0, total - train_seconds / 60):.0f} more minutes at this pace):\n  {command}"
    )


class Stage:
    """The display of one stage of data preparation, ``what`` (e.g. ``generating 61,500 sentence
    pairs``), on standard error: a tqdm bar counting to ``total`` on a terminal (calling the stage
    with a count moves it there); elsewhere a plain line as it starts and one as it ends, with its
    seconds; nothing when ``quiet``. Use it as a context manager."""

    def __init__(
        self, what: str, total: int | None = None, quiet: bool = False, stream: TextIO | None = None
    ):
        self.what, self.total, self.quiet = what, total, quiet
        self.stream = sys.stderr if stream is None else stream
        self.started = time.perf_counter()
        self.bar: tqdm | None = None

    def __enter__(self) -> Stage:
        if self.quiet:
            return self
        if self.stream.isatty():
            self.bar = tqdm(
                total=self.total, desc=self.what, file=self.stream, dynamic_ncols=True, mininterval=0.5
            )
        else:
            print(f"{self.what}…", file=self.stream, flush=True)
        return self

    def __call__(self, count: int) -> None:
        """``count`` done so far."""
        if self.bar is not None:
            self.bar.update(count - self.bar.n)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            if kind is None and self.bar.total is not None:
                self.bar.update(self.bar.total - self.bar.n)
            self.bar.close()
        elif not self.quiet and kind is None:
            print(
                f"{self.what}: done in {clock(time.perf_counter() - self.started)}",
                file=self.stream,
                flush=True,
            )
