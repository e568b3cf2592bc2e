"""Stopping training cleanly on SIGINT and SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def stop_requests(requested: Callable[[], bool], request: Callable[[int], None]) -> Iterator[None]:
    """While training, SIGINT and SIGTERM only call ``request(signum)`` (the trainer checks after
    each step); one more while a stop is already ``requested()`` stops at once with
    KeyboardInterrupt. The previous handlers come back after. An ignored signal stays ignored (a
    background job's SIGINT), and handlers can only be installed from the main thread: elsewhere
    the signals keep theirs."""

    def handler(signum: int, frame: Any) -> None:
        if requested():
            raise KeyboardInterrupt
        request(signum)

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
        for s, old in previous.items():
            signal.signal(s, old or signal.SIG_DFL)  # None: a handler set outside Python
