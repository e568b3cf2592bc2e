"""Stopping training cleanly on SIGINT and SIGTERM.

The first signal asks the trainer to stop after the current step, with a checkpoint (after a
SIGINT the main process says so: ``finishing step N and saving; press Ctrl-C again to stop
without saving``); a second one stops at once with KeyboardInterrupt, except inside an
:func:`uninterrupted` block (a checkpoint's write and rename), which it lets finish first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class _Deferral:
    """How deep the :func:`uninterrupted` blocks are, and whether a stop at once waits for their end."""

    depth = 0
    pending = False


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A block that a second signal does not cut: its KeyboardInterrupt is raised when the block
    ends (when it ends without an exception of its own)."""
    _Deferral.depth += 1
    try:
        yield
    finally:
        _Deferral.depth -= 1
    if _Deferral.depth == 0 and _Deferral.pending:
        _Deferral.pending = False
        raise KeyboardInterrupt


def notice(step: int) -> None:
    """Tell the user, at once and on standard error, what the first Ctrl-C does (written with
    ``os.write``: the signal may have come in the middle of a write to ``sys.stderr``)."""
    lead = "\n" if os.isatty(2) else ""
    text = f"{lead}vaswani: finishing step {step} and saving; press Ctrl-C again to stop without saving\n"
    os.write(2, text.encode())


class Stoppable(Protocol):
    """What a signal asks to stop: ``stop_signal`` is None until then, then the signal's number."""

    stop_signal: int | None


@contextlib.contextmanager
def stop_requests(trainer: Stoppable, step: Callable[[], int] | None = None) -> Iterator[None]:
    """While training, SIGINT and SIGTERM only set ``trainer.stop_signal`` (the trainer checks
    after each step); after a SIGINT, with ``step`` (the main process's: the step in progress,
    one past the last finished), :func:`notice` says which step it finishes. One more while a
    stop is already asked stops at once with KeyboardInterrupt (at the end of an
    :func:`uninterrupted` block). The previous handlers come back after. An ignored signal stays
    ignored (a background job's SIGINT), and handlers can only be installed from the main
    thread: elsewhere the signals keep theirs."""

    def handler(signum: int, frame: Any) -> None:
        if trainer.stop_signal is not None:
            if _Deferral.depth:
                _Deferral.pending = True
                return
            raise KeyboardInterrupt
        trainer.stop_signal = signum
        if step is not None and signum == signal.SIGINT:  # in a checkpoint's write: the step it saves
            notice(step() - 1 if _Deferral.depth else step())

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        s: signal.signal(s, handler)
        for s in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(s) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        _Deferral.pending = False
        for s, old in previous.items():
            signal.signal(s, old or signal.SIG_DFL)  # None: a handler set outside Python
